// inspect_state_file: a JSON report of a state file, valid or not, with each checksum's status.
#include <algorithm>
#include <string>
#include <vector>

#include "crc32c.hpp"
#include "json.hpp"
#include "state_format.hpp"

namespace octopt {
namespace {

using detail::bad_header_crc;
using detail::bad_tensor_crc;
using detail::Entry;
using detail::find_meta;
using detail::Header;
using detail::header_checksum;
using detail::hex8;
using detail::InFile;
using detail::Json;
using detail::kHeaderCrcName;
using detail::kKeyFormat;
using detail::kKeyVersion;
using detail::missing_header_crc;
using detail::missing_tensor_crc;
using detail::OctoptKeys;
using detail::prefix;
using detail::read_header;
using detail::read_octopt_keys;

}  // namespace

std::string inspect_state_file(const std::string& path) {
  constexpr const char* fn = "inspect_state_file";
  const std::string pre = prefix(fn, path);
  InFile f(path, fn);
  Header h;
  OctoptKeys k;
  std::string error;
  bool header_ok = false, keys_ok = false;
  try {
    read_header(f, path, fn, h);
    header_ok = true;
    read_octopt_keys(h, path, fn, k);
    keys_ok = true;
  } catch (const FormatError& e) {
    error = e.what();
  }
  const auto note = [&](const std::string& problem) {
    if (error.empty()) error = problem;
  };

  Json::Object report;
  report.emplace_back("path", Json::string(detail::printable(path)));
  report.emplace_back("file_size", Json::integer(h.file_size));
  report.emplace_back("header_size", h.sizes_known ? Json::integer(h.header_size) : Json());
  report.emplace_back("data_size", h.sizes_known ? Json::integer(h.data_size) : Json());
  const std::string* format = header_ok ? find_meta(h, kKeyFormat) : nullptr;
  const std::string* version = header_ok ? find_meta(h, kKeyVersion) : nullptr;
  Json::Object meta;
  for (const auto& [key, value] : h.metadata) meta.emplace_back(key, Json::string(value));

  std::string header_status = "missing";
  Json::Array tensors;
  std::size_t n_ok = 0, n_bad = 0, n_missing = 0;
  if (header_ok) {
    if (keys_ok && !k.crcs.count(kHeaderCrcName)) note(missing_header_crc(pre));
    for (const Entry& t : h.tensors)
      if (keys_ok && !k.crcs.count(t.name)) note(missing_tensor_crc(pre, t.name));
    if (keys_ok && k.crcs.count(kHeaderCrcName)) {
      const std::uint32_t hc = header_checksum(h);
      header_status = hc == k.crcs[kHeaderCrcName] ? "ok" : "bad";
      if (header_status == "bad") note(bad_header_crc(pre, k.crcs[kHeaderCrcName], hc));
    }
    std::vector<unsigned char> buf(std::size_t(1) << 20);
    bool readable = true;
    for (const Entry& t : h.tensors) {
      Json computed;
      std::string status;
      if (readable) {
        try {
          std::uint32_t c = 0;
          for (std::uint64_t at = t.begin; at < t.end;) {
            const std::size_t n = std::size_t(std::min<std::uint64_t>(buf.size(), t.end - at));
            f.read_at(8 + h.header_size + at, buf.data(), n);
            c = detail::crc32c(c, buf.data(), n);
            at += n;
          }
          computed = Json::string(hex8(c));
          const auto stored = k.crcs.find(t.name);
          if (stored == k.crcs.end()) {
            status = "missing";
          } else if (stored->second == c) {
            status = "ok";
          } else {
            status = "bad";
            note(bad_tensor_crc(pre, t.name, stored->second, c));
          }
        } catch (const FormatError& e) {  // the file shrank while being read
          note(e.what());
          readable = false;
        }
      }
      if (!readable) status = "unread";
      n_ok += status == "ok";
      n_bad += status == "bad";
      n_missing += status == "missing";
      Json::Array shape;
      for (const std::int64_t d : t.shape) shape.push_back(Json::integer(std::uint64_t(d)));
      const auto stored = k.crcs.find(t.name);
      tensors.push_back(Json::object({
          {"name", Json::string(t.name)},
          {"dtype", Json::string(t.dtype)},
          {"shape", Json::array(std::move(shape))},
          {"data_offsets", Json::array({Json::integer(t.begin), Json::integer(t.end)})},
          {"nbytes", Json::integer(t.end - t.begin)},
          {"crc32c", stored == k.crcs.end() ? Json() : Json::string(hex8(stored->second))},
          {"crc32c_computed", std::move(computed)},
          {"checksum", Json::string(status)},
      }));
    }
  }
  report.emplace_back("valid", Json::boolean(error.empty()));
  report.emplace_back("error", error.empty() ? Json() : Json::string(error));
  report.emplace_back("format", format ? Json::string(*format) : Json());
  report.emplace_back("format_version", version ? Json::string(*version) : Json());
  report.emplace_back("metadata", Json::object(std::move(meta)));
  report.emplace_back("header_checksum", Json::string(header_status));
  report.emplace_back("tensors", Json::array(std::move(tensors)));
  report.emplace_back("checksums", Json::object({{"ok", Json::integer(n_ok)},
                                                 {"bad", Json::integer(n_bad)},
                                                 {"missing", Json::integer(n_missing)}}));
  return detail::write_json(Json::object(std::move(report)));
}

}  // namespace octopt

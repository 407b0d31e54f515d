// Reading state files: the safetensors structure (lengths, JSON, tensor entries, layout), then octopt's
// keys (format, version, checksum table), then the checksums of the header and of every tensor's data.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <set>
#include <string_view>
#include <utility>

#include "crc32c.hpp"
#include "json.hpp"
#include "state_format.hpp"

namespace octopt {
namespace detail {
namespace {

bool parse_hex8(const std::string& s, std::uint32_t* out) {
  if (s.size() != 8) return false;
  std::uint32_t v = 0;
  for (const char c : s) {
    v <<= 4;
    if (c >= '0' && c <= '9')
      v |= std::uint32_t(c - '0');
    else if (c >= 'a' && c <= 'f')
      v |= std::uint32_t(c - 'a' + 10);
    else
      return false;
  }
  *out = v;
  return true;
}

std::string offsets_str(std::uint64_t begin, std::uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// A JSON value for a message, shortened.
std::string show(const Json& v) {
  std::string s = detail::write_json(v);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

Entry parse_entry(const std::string& name, const Json& v, const std::string& pre) {
  const std::string where = pre + "tensor " + quote(name) + ": ";
  if (!v.is_object()) throw FormatError(where + "entry must be an object, got " + Json::kind_name(v.kind()));
  for (const Json::Member& m : v.as_object()) {
    if (m.first != "dtype" && m.first != "shape" && m.first != "data_offsets")
      throw FormatError(where + "unknown key " + quote(m.first) + " (expected dtype, shape, data_offsets)");
  }
  Entry e;
  e.name = name;
  const Json* dtype = v.find("dtype");
  const Json* shape = v.find("shape");
  const Json* offsets = v.find("data_offsets");
  if (!dtype) throw FormatError(where + "missing key 'dtype'");
  if (!shape) throw FormatError(where + "missing key 'shape'");
  if (!offsets) throw FormatError(where + "missing key 'data_offsets'");
  if (!dtype->is_string()) throw FormatError(where + "dtype must be a string, got " + show(*dtype));
  e.dtype = dtype->as_string();
  const std::size_t itemsize = state_dtype_size(e.dtype);
  if (itemsize == 0) throw FormatError(where + "unknown dtype " + quote(e.dtype) + " (known: " + known_dtypes() + ")");
  if (!shape->is_array()) throw FormatError(where + "shape must be an array, got " + show(*shape));
  for (std::size_t k = 0; k < shape->as_array().size(); ++k) {
    const Json& d = shape->as_array()[k];
    if (!d.is_unsigned() || d.as_uint64() > std::uint64_t(std::numeric_limits<std::int64_t>::max()))
      throw FormatError(where + "shape[" + std::to_string(k) + "] must be a non-negative integer, got " + show(d));
    e.shape.push_back(std::int64_t(d.as_uint64()));
  }
  if (!offsets->is_array() || offsets->as_array().size() != 2 || !offsets->as_array()[0].is_unsigned() ||
      !offsets->as_array()[1].is_unsigned())
    throw FormatError(where + "data_offsets must be [begin, end] with non-negative integers, got " + show(*offsets));
  e.begin = offsets->as_array()[0].as_uint64();
  e.end = offsets->as_array()[1].as_uint64();
  if (e.end < e.begin)
    throw FormatError(where + "data_offsets " + offsets_str(e.begin, e.end) + " end before they begin");
  std::uint64_t nbytes = 0;
  if (!byte_count(e.shape, itemsize, &nbytes) || !extents_fit(e.shape, itemsize))
    throw FormatError(where + "shape " + shape_str(e.shape) + " of " + e.dtype +
                      " is too large (byte count overflows)");
  if (nbytes != e.end - e.begin)
    throw FormatError(where + "shape " + shape_str(e.shape) + " of " + e.dtype + " needs " + std::to_string(nbytes) +
                      " bytes but data_offsets " + offsets_str(e.begin, e.end) + " span " +
                      std::to_string(e.end - e.begin));
  return e;
}

}  // namespace

const std::string* find_meta(const Header& h, std::string_view key) {
  for (const auto& kv : h.metadata)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

// The safetensors layer: lengths, JSON, entries, a contiguous layout that fills the data section exactly.
// Fills `h` as it goes, so that a caller catching the FormatError can report what was established.
void read_header(const InFile& f, const std::string& path, const char* fn, Header& h) {
  const std::string pre = prefix(fn, path);
  h.file_size = f.size();
  if (h.file_size < 8)
    throw FormatError(pre + "file is " + std::to_string(h.file_size) +
                      " bytes, too short for the 8-byte header length (truncated?)");
  unsigned char len[8];
  f.read_at(0, len, 8);
  std::uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | len[k];
  if (n > kMaxStateHeaderBytes)
    throw FormatError(pre + "header length " + std::to_string(n) + " exceeds the limit of " +
                      std::to_string(kMaxStateHeaderBytes) + " bytes (corrupt file?)");
  if (n > h.file_size - 8)
    throw FormatError(pre + "header length " + std::to_string(n) + " exceeds the " + std::to_string(h.file_size - 8) +
                      " bytes that follow it (truncated?)");
  h.header_size = n;
  h.data_size = h.file_size - 8 - n;
  h.sizes_known = true;

  std::string text(std::size_t(n), '\0');  // bounded by the limit and by the file's size
  f.read_at(8, text.data(), text.size());
  Json doc;
  try {
    doc = detail::parse_json(text, detail::JsonParseOptions{8});
  } catch (const detail::JsonParseError& e) {
    throw FormatError(pre + "header is not valid JSON (at byte " + std::to_string(e.offset) +
                      " of the header): " + e.problem);
  }
  if (!doc.is_object()) throw FormatError(pre + "header must be a JSON object, got " + Json::kind_name(doc.kind()));

  for (const Json::Member& m : doc.as_object()) {
    if (m.first == kMetadataKey) {
      if (!m.second.is_object())
        throw FormatError(pre + "'__metadata__' must be an object, got " + Json::kind_name(m.second.kind()));
      for (const Json::Member& kv : m.second.as_object()) {
        if (!kv.second.is_string())
          throw FormatError(pre + "metadata key " + quote(kv.first) + ": value must be a string, got " +
                            show(kv.second));
        h.metadata.emplace_back(kv.first, kv.second.as_string());
      }
      h.has_metadata = true;
      continue;
    }
    if (const char* problem = tensor_name_problem(m.first))
      throw FormatError(pre + "header key " + quote(m.first) + " " + problem + ": not a valid tensor name");
    h.tensors.push_back(parse_entry(m.first, m.second, pre));
  }

  // Data order; tensors of zero bytes may share an offset and keep their header order.
  std::stable_sort(h.tensors.begin(), h.tensors.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t expect = 0;
  for (std::size_t k = 0; k < h.tensors.size(); ++k) {
    const Entry& t = h.tensors[k];
    if (t.begin < expect)
      throw FormatError(pre + "tensor " + quote(t.name) + ": data_offsets " + offsets_str(t.begin, t.end) +
                        " overlap tensor " + quote(h.tensors[k - 1].name) + " " +
                        offsets_str(h.tensors[k - 1].begin, h.tensors[k - 1].end));
    if (t.begin > expect)
      throw FormatError(pre + "tensor " + quote(t.name) + ": data_offsets " + offsets_str(t.begin, t.end) +
                        " leave a gap of " + std::to_string(t.begin - expect) + " bytes after " +
                        (k ? "tensor " + quote(h.tensors[k - 1].name) : std::string("the header")));
    expect = t.end;
  }
  if (expect > h.data_size)
    throw FormatError(pre + "tensors need " + std::to_string(expect) + " bytes of data but the file holds " +
                      std::to_string(h.data_size) + " after the header (truncated?)");
  if (expect < h.data_size)
    throw FormatError(pre + std::to_string(h.data_size - expect) + " unexpected bytes after the last tensor (data is " +
                      std::to_string(h.data_size) + " bytes, tensors end at " + std::to_string(expect) + ")");
}

// octopt's layer on top: format, version and the checksum table.
void read_octopt_keys(const Header& h, const std::string& path, const char* fn, OctoptKeys& k) {
  const std::string pre = prefix(fn, path);
  if (!h.has_metadata) throw FormatError(pre + "the header has no '__metadata__': not an octopt state file");
  const std::string* format = find_meta(h, kKeyFormat);
  if (!format) throw FormatError(pre + "metadata key 'octopt.format' is missing: not an octopt state file");
  if (*format != kStateFormat)
    throw FormatError(pre + "metadata key 'octopt.format' is " + quote(*format) + ", expected 'octopt-state'");
  const std::string* version = find_meta(h, kKeyVersion);
  if (!version) throw FormatError(pre + "metadata key 'octopt.format_version' is missing");
  if (*version != std::to_string(kStateFormatVersion))
    throw FormatError(pre + "unsupported format version " + quote(*version) + " (this build reads " +
                      std::to_string(kStateFormatVersion) + ")");
  const std::string* crc_text = find_meta(h, kKeyCrc);
  if (!crc_text) throw FormatError(pre + "metadata key 'octopt.crc32c' is missing (no checksums)");
  Json crcs;
  try {
    crcs = detail::parse_json(*crc_text, detail::JsonParseOptions{2});
  } catch (const detail::JsonParseError& e) {
    throw FormatError(pre + "metadata key 'octopt.crc32c' is not valid JSON (at byte " + std::to_string(e.offset) +
                      " of its value): " + e.problem);
  }
  if (!crcs.is_object())
    throw FormatError(pre + "metadata key 'octopt.crc32c' must hold a JSON object, got " +
                      Json::kind_name(crcs.kind()));
  std::set<std::string_view> names;
  for (const Entry& t : h.tensors) names.insert(t.name);
  for (const Json::Member& m : crcs.as_object()) {
    std::uint32_t v = 0;
    if (!m.second.is_string() || !parse_hex8(m.second.as_string(), &v))
      throw FormatError(pre + "metadata key 'octopt.crc32c': entry " + quote(m.first) +
                        " must be 8 lowercase hex digits, got " + show(m.second));
    if (m.first != kHeaderCrcName && !names.count(m.first))
      throw FormatError(pre + "metadata key 'octopt.crc32c' has a checksum for " + quote(m.first) +
                        ", which is not a tensor in this file");
    k.crcs[m.first] = v;
  }
}

std::uint32_t header_checksum(const Header& h) {
  std::vector<std::pair<std::string_view, std::string_view>> meta(h.metadata.begin(), h.metadata.end());
  return header_checksum(std::move(meta), h.tensors);
}

std::string missing_header_crc(const std::string& pre) {
  return pre + "metadata key 'octopt.crc32c' has no header checksum ('__header__')";
}
std::string missing_tensor_crc(const std::string& pre, const std::string& name) {
  return pre + "metadata key 'octopt.crc32c' has no checksum for tensor " + quote(name);
}
std::string bad_header_crc(const std::string& pre, std::uint32_t stored, std::uint32_t computed) {
  return pre + "header checksum mismatch (stored " + hex8(stored) + ", computed " + hex8(computed) +
         "): metadata or tensor table corrupt";
}
std::string bad_tensor_crc(const std::string& pre, const std::string& name, std::uint32_t stored,
                           std::uint32_t computed) {
  return pre + "tensor " + quote(name) + ": checksum mismatch (stored " + hex8(stored) + ", computed " +
         hex8(computed) + "): data corrupt";
}

}  // namespace detail

namespace {

using detail::bad_header_crc;
using detail::bad_tensor_crc;
using detail::Entry;
using detail::Header;
using detail::header_checksum;
using detail::InFile;
using detail::kHeaderCrcName;
using detail::missing_header_crc;
using detail::missing_tensor_crc;
using detail::OctoptKeys;
using detail::owned_key;
using detail::prefix;
using detail::read_header;
using detail::read_octopt_keys;
using detail::require_little_endian;

}  // namespace

StateFile read_state_file(const std::string& path) {
  constexpr const char* fn = "read_state_file";
  require_little_endian(fn);
  const std::string pre = prefix(fn, path);
  InFile f(path, fn);
  Header h;
  read_header(f, path, fn, h);
  OctoptKeys k;
  read_octopt_keys(h, path, fn, k);
  if (!k.crcs.count(kHeaderCrcName)) throw FormatError(missing_header_crc(pre));
  for (const Entry& t : h.tensors)
    if (!k.crcs.count(t.name)) throw FormatError(missing_tensor_crc(pre, t.name));
  const std::uint32_t hc = header_checksum(h);
  if (hc != k.crcs[kHeaderCrcName]) throw FormatError(bad_header_crc(pre, k.crcs[kHeaderCrcName], hc));

  // The header is valid: the data section is exactly the tensors' bytes and at most the file's size.
  StateFile sf;
  sf.bytes.resize(std::size_t(h.data_size));
  if (h.data_size) f.read_at(8 + h.header_size, sf.bytes.data(), sf.bytes.size());
  for (const Entry& t : h.tensors) {
    const std::uint8_t* data = sf.bytes.data() + t.begin;
    const std::uint64_t nbytes = t.end - t.begin;
    const std::uint32_t c = detail::crc32c(0, data, nbytes);
    if (c != k.crcs[t.name]) throw FormatError(bad_tensor_crc(pre, t.name, k.crcs[t.name], c));
    sf.tensors.push_back(StateFile::Tensor{t.name, t.dtype, t.shape, nbytes, data, c});
  }
  for (const auto& [key, value] : h.metadata)
    if (!owned_key(key)) sf.metadata.emplace(key, value);
  return sf;
}

}  // namespace octopt

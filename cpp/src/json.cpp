#include "json.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <system_error>

namespace octopt::detail {

// ---------------------------------------------------------------------------------------------------
// UTF-8

namespace {

bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

// Length of the well-formed UTF-8 sequence starting at p (Unicode table 3-7: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0 when the bytes there are not one.
std::size_t utf8_sequence_length(const unsigned char* p, std::size_t avail) {
  const unsigned char c = p[0];
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return avail >= 2 && is_cont(p[1]) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (avail < 3 || !is_cont(p[2])) return 0;
    const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return p[1] >= lo && p[1] <= hi ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (avail < 4 || !is_cont(p[2]) || !is_cont(p[3])) return 0;
    const unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return p[1] >= lo && p[1] <= hi ? 4 : 0;
  }
  return 0;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

const char kHex[] = "0123456789abcdef";

}  // namespace

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = utf8_sequence_length(p + i, s.size() - i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string printable(std::string_view s) {
  std::string out;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t len = utf8_sequence_length(p + i, s.size() - i);
    if (len == 0 || p[i] < 0x20 || p[i] == 0x7F) {
      out += "\\x";
      out += kHex[p[i] >> 4];
      out += kHex[p[i] & 15];
      ++i;
    } else {
      out.append(s.data() + i, len);
      i += len;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------
// Values

JsonParseError::JsonParseError(std::size_t at, const std::string& problem)
    : std::runtime_error("at byte " + std::to_string(at) + ": " + problem), offset(at), problem(problem) {}

Json Json::boolean(bool b) {
  Json j;
  j.kind_ = Kind::boolean;
  j.u_ = b;
  return j;
}

Json Json::integer(std::uint64_t magnitude, bool negative) {
  Json j;
  j.kind_ = Kind::integer;
  j.u_ = magnitude;
  j.negative_ = negative && magnitude != 0;
  return j;
}

Json Json::number(double d) {
  Json j;
  j.kind_ = Kind::number;
  j.d_ = d;
  return j;
}

Json Json::string(std::string s) {
  Json j;
  j.kind_ = Kind::string;
  j.s_ = std::move(s);
  return j;
}

Json Json::array(Array items) {
  Json j;
  j.kind_ = Kind::array;
  j.a_ = std::move(items);
  return j;
}

Json Json::object(Object members) {
  Json j;
  j.kind_ = Kind::object;
  j.o_ = std::move(members);
  return j;
}

const char* Json::kind_name(Kind k) {
  switch (k) {
    case Kind::null:
      return "null";
    case Kind::boolean:
      return "a boolean";
    case Kind::integer:
      return "an integer";
    case Kind::number:
      return "a number";
    case Kind::string:
      return "a string";
    case Kind::array:
      return "an array";
    case Kind::object:
      return "an object";
  }
  return "?";
}

namespace {
[[noreturn]] void wrong_kind(const char* want, Json::Kind have) {
  throw std::logic_error(std::string("Json: expected ") + want + ", have " + Json::kind_name(have));
}
}  // namespace

bool Json::as_bool() const {
  if (kind_ != Kind::boolean) wrong_kind("a boolean", kind_);
  return u_ != 0;
}

std::uint64_t Json::as_uint64() const {
  if (!is_unsigned()) wrong_kind("a non-negative integer", kind_);
  return u_;
}

std::uint64_t Json::magnitude() const {
  if (kind_ != Kind::integer) wrong_kind("an integer", kind_);
  return u_;
}

double Json::as_double() const {
  if (kind_ == Kind::integer) return negative_ ? -double(u_) : double(u_);
  if (kind_ != Kind::number) wrong_kind("a number", kind_);
  return d_;
}

const std::string& Json::as_string() const {
  if (kind_ != Kind::string) wrong_kind("a string", kind_);
  return s_;
}

const Json::Array& Json::as_array() const {
  if (kind_ != Kind::array) wrong_kind("an array", kind_);
  return a_;
}

Json::Array& Json::as_array() {
  if (kind_ != Kind::array) wrong_kind("an array", kind_);
  return a_;
}

const Json::Object& Json::as_object() const {
  if (kind_ != Kind::object) wrong_kind("an object", kind_);
  return o_;
}

Json::Object& Json::as_object() {
  if (kind_ != Kind::object) wrong_kind("an object", kind_);
  return o_;
}

const Json* Json::find(std::string_view key) const {
  for (const Member& m : as_object())
    if (m.first == key) return &m.second;
  return nullptr;
}

void Json::set(std::string key, Json value) {
  for (Member& m : as_object()) {
    if (m.first == key) {
      m.second = std::move(value);
      return;
    }
  }
  o_.emplace_back(std::move(key), std::move(value));
}

// ---------------------------------------------------------------------------------------------------
// Parser

namespace {

class Parser {
 public:
  Parser(std::string_view text, const JsonParseOptions& options) : t_(text), max_depth_(options.max_depth) {}

  Json parse_document() {
    skip_ws();
    Json v = parse_value();
    skip_ws();
    if (i_ != t_.size()) fail(i_, "unexpected " + describe(i_) + " after the JSON value");
    return v;
  }

 private:
  std::string_view t_;
  std::size_t i_ = 0;
  int depth_ = 0;
  int max_depth_;

  [[noreturn]] void fail(std::size_t at, const std::string& problem) const { throw JsonParseError(at, problem); }

  std::string describe(std::size_t at) const {
    if (at >= t_.size()) return "end of input";
    const unsigned char c = static_cast<unsigned char>(t_[at]);
    if (c >= 0x20 && c < 0x7F) return std::string("character '") + char(c) + "'";
    char buf[16];
    std::snprintf(buf, sizeof buf, "byte 0x%02x", unsigned(c));
    return buf;
  }

  bool at_end() const { return i_ >= t_.size(); }
  char peek() const { return at_end() ? '\0' : t_[i_]; }

  void skip_ws() {
    while (!at_end() && (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r')) ++i_;
  }

  void expect(char c, const char* what) {
    if (at_end() || t_[i_] != c) fail(i_, std::string("expected ") + what + ", found " + describe(i_));
    ++i_;
  }

  Json parse_value() {
    if (at_end()) fail(i_, "expected a JSON value, found end of input");
    switch (t_[i_]) {
      case '{':
        return parse_object();
      case '[':
        return parse_array();
      case '"':
        return Json::string(parse_string());
      case 't':
        literal("true");
        return Json::boolean(true);
      case 'f':
        literal("false");
        return Json::boolean(false);
      case 'n':
        literal("null");
        return Json();
      default:
        if (t_[i_] == '-' || (t_[i_] >= '0' && t_[i_] <= '9')) return parse_number();
        fail(i_, "expected a JSON value, found " + describe(i_));
    }
  }

  void literal(std::string_view word) {
    if (t_.substr(i_, word.size()) != word) fail(i_, "invalid literal (expected '" + std::string(word) + "')");
    i_ += word.size();
  }

  void enter(std::size_t at) {
    if (++depth_ > max_depth_) fail(at, "nesting deeper than " + std::to_string(max_depth_) + " levels");
  }

  Json parse_object() {
    const std::size_t start = i_;
    enter(start);
    ++i_;  // '{'
    Json::Object members;
    std::vector<std::size_t> key_offsets;
    skip_ws();
    if (peek() == '}') {
      ++i_;
    } else {
      for (;;) {
        skip_ws();
        if (peek() != '"') fail(i_, "expected a string key, found " + describe(i_));
        key_offsets.push_back(i_);
        std::string key = parse_string();
        skip_ws();
        expect(':', "':' after an object key");
        skip_ws();
        Json value = parse_value();
        members.emplace_back(std::move(key), std::move(value));
        skip_ws();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        if (peek() == '}') {
          ++i_;
          break;
        }
        fail(i_, "expected ',' or '}' in an object, found " + describe(i_));
      }
    }
    check_duplicate_keys(members, key_offsets);
    --depth_;
    return Json::object(std::move(members));
  }

  void check_duplicate_keys(const Json::Object& members, const std::vector<std::size_t>& offsets) const {
    if (members.size() < 2) return;
    std::vector<std::size_t> order(members.size());
    std::iota(order.begin(), order.end(), std::size_t(0));
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return members[a].first < members[b].first; });
    for (std::size_t k = 1; k < order.size(); ++k) {
      if (members[order[k - 1]].first == members[order[k]].first)  // stable: order[k] is the later one
        fail(offsets[order[k]], "duplicate key \"" + printable(members[order[k]].first) + "\" in an object");
    }
  }

  Json parse_array() {
    enter(i_);
    ++i_;  // '['
    Json::Array items;
    skip_ws();
    if (peek() == ']') {
      ++i_;
    } else {
      for (;;) {
        skip_ws();
        items.push_back(parse_value());
        skip_ws();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        if (peek() == ']') {
          ++i_;
          break;
        }
        fail(i_, "expected ',' or ']' in an array, found " + describe(i_));
      }
    }
    --depth_;
    return Json::array(std::move(items));
  }

  std::uint32_t hex4(std::size_t at) const {
    if (t_.size() - at < 4) fail(at, "incomplete \\u escape");
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const char c = t_[at + k];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= std::uint32_t(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= std::uint32_t(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= std::uint32_t(c - 'A' + 10);
      else
        fail(at + k, "invalid hex digit in a \\u escape: " + describe(at + k));
    }
    return v;
  }

  std::string parse_string() {
    const std::size_t start = i_;
    ++i_;  // opening quote
    std::string out;
    const auto* p = reinterpret_cast<const unsigned char*>(t_.data());
    for (;;) {
      if (at_end()) fail(start, "unterminated string");
      const unsigned char c = p[i_];
      if (c == '"') {
        ++i_;
        return out;
      }
      if (c < 0x20) fail(i_, "unescaped control character " + describe(i_) + " in a string");
      if (c == '\\') {
        const std::size_t esc = i_;
        ++i_;
        if (at_end()) fail(start, "unterminated string");
        const char e = t_[i_++];
        switch (e) {
          case '"':
            out += '"';
            break;
          case '\\':
            out += '\\';
            break;
          case '/':
            out += '/';
            break;
          case 'b':
            out += '\b';
            break;
          case 'f':
            out += '\f';
            break;
          case 'n':
            out += '\n';
            break;
          case 'r':
            out += '\r';
            break;
          case 't':
            out += '\t';
            break;
          case 'u': {
            std::uint32_t cp = hex4(i_);
            i_ += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) fail(esc, "lone low surrogate in a \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
              if (t_.substr(i_, 2) != "\\u") fail(esc, "high surrogate not followed by a low surrogate");
              const std::uint32_t lo = hex4(i_ + 2);
              if (lo < 0xDC00 || lo > 0xDFFF) fail(i_, "high surrogate not followed by a low surrogate");
              i_ += 6;
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            append_utf8(out, cp);
            break;
          }
          default:
            fail(esc, "invalid escape sequence '\\" + printable(std::string_view(&e, 1)) + "'");
        }
        continue;
      }
      const std::size_t len = utf8_sequence_length(p + i_, t_.size() - i_);
      if (len == 0) fail(i_, "invalid UTF-8 in a string");
      out.append(t_.data() + i_, len);
      i_ += len;
    }
  }

  bool digit() const { return !at_end() && t_[i_] >= '0' && t_[i_] <= '9'; }

  Json parse_number() {
    const std::size_t start = i_;
    const bool negative = peek() == '-';
    if (negative) ++i_;
    if (!digit()) fail(i_, "expected a digit, found " + describe(i_));
    if (t_[i_] == '0') {
      ++i_;
      if (digit()) fail(start, "leading zeros are not allowed in a number");
    } else {
      while (digit()) ++i_;
    }
    bool integral = true;
    if (peek() == '.') {
      ++i_;
      if (!digit()) fail(i_, "expected a digit after the decimal point, found " + describe(i_));
      while (digit()) ++i_;
      integral = false;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++i_;
      if (peek() == '+' || peek() == '-') ++i_;
      if (!digit()) fail(i_, "expected a digit in the exponent, found " + describe(i_));
      while (digit()) ++i_;
      integral = false;
    }
    const std::string_view text = t_.substr(start, i_ - start);
    if (integral) {
      const std::string_view digits = text.substr(negative ? 1 : 0);
      std::uint64_t magnitude = 0;
      const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude);
      if (r.ec == std::errc() && r.ptr == digits.data() + digits.size() && !(negative && magnitude == 0))
        return Json::integer(magnitude, negative);
      // beyond 64 bits, or "-0": fall through to a double
    }
    double d = 0;
    const auto r = std::from_chars(text.data(), text.data() + text.size(), d);
    if (r.ec == std::errc::result_out_of_range) fail(start, "number out of the range of a double");
    if (r.ec != std::errc() || r.ptr != text.data() + text.size()) fail(start, "malformed number");
    return Json::number(d);
  }
};

}  // namespace

Json parse_json(std::string_view text, const JsonParseOptions& options) {
  return Parser(text, options).parse_document();
}

// ---------------------------------------------------------------------------------------------------
// Writer

namespace {

void write_string(const std::string& s, std::string& out) {
  if (!is_valid_utf8(s)) throw std::invalid_argument("write_json: string \"" + printable(s) + "\" is not valid UTF-8");
  out += '"';
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

}  // namespace

void write_json(const Json& v, std::string& out) {
  switch (v.kind()) {
    case Json::Kind::null:
      out += "null";
      return;
    case Json::Kind::boolean:
      out += v.as_bool() ? "true" : "false";
      return;
    case Json::Kind::integer:
      if (v.negative()) out += '-';
      out += std::to_string(v.magnitude());
      return;
    case Json::Kind::number: {
      const double d = v.as_double();
      if (!std::isfinite(d)) throw std::invalid_argument("write_json: cannot write a non-finite number");
      char buf[32];
      const auto r = std::to_chars(buf, buf + sizeof buf, d);  // shortest round-trip form
      std::string_view s(buf, std::size_t(r.ptr - buf));
      out += s;
      if (s.find_first_of(".e") == std::string_view::npos) out += ".0";  // stays a non-integer when re-read
      return;
    }
    case Json::Kind::string:
      write_string(v.as_string(), out);
      return;
    case Json::Kind::array: {
      out += '[';
      bool first = true;
      for (const Json& item : v.as_array()) {
        if (!first) out += ',';
        first = false;
        write_json(item, out);
      }
      out += ']';
      return;
    }
    case Json::Kind::object: {
      out += '{';
      bool first = true;
      for (const Json::Member& m : v.as_object()) {
        if (!first) out += ',';
        first = false;
        write_string(m.first, out);
        out += ':';
        write_json(m.second, out);
      }
      out += '}';
      return;
    }
  }
}

std::string write_json(const Json& value) {
  std::string out;
  write_json(value, out);
  return out;
}

}  // namespace octopt::detail

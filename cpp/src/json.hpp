#pragma once
// A small JSON value, a strict parser and a deterministic writer: exactly what the state-file header
// needs (RFC 8259 JSON, UTF-8 only). Internal to the core; not installed.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace octopt::detail {

// Malformed JSON; `offset` is the byte position of the problem in the parsed text and is also part of
// what(), e.g. "at byte 17: expected ':' after an object key".
struct JsonParseError : std::runtime_error {
  JsonParseError(std::size_t at, const std::string& problem);
  std::size_t offset;
  std::string problem;  // what() without the position
};

class Json {
 public:
  enum class Kind : std::uint8_t { null, boolean, integer, number, string, array, object };
  using Array = std::vector<Json>;
  using Member = std::pair<std::string, Json>;
  using Object = std::vector<Member>;  // insertion (= source) order; keys are unique

  Json() = default;  // null
  static Json boolean(bool b);
  static Json integer(std::uint64_t magnitude, bool negative = false);
  static Json number(double d);  // a finite double (the writer refuses NaN and Inf)
  static Json string(std::string s);
  static Json array(Array items = {});
  static Json object(Object members = {});

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::null; }
  bool is_bool() const { return kind_ == Kind::boolean; }
  bool is_integer() const { return kind_ == Kind::integer; }  // written without fraction or exponent
  bool is_unsigned() const { return kind_ == Kind::integer && !negative_; }
  bool is_number() const { return kind_ == Kind::integer || kind_ == Kind::number; }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_array() const { return kind_ == Kind::array; }
  bool is_object() const { return kind_ == Kind::object; }

  // Accessors throw std::logic_error when the kind does not match.
  bool as_bool() const;
  std::uint64_t as_uint64() const;             // a non-negative integer, exact
  std::uint64_t magnitude() const;             // an integer's absolute value, exact
  bool negative() const { return negative_; }  // an integer below zero
  double as_double() const;                    // any number (integers above 2^53 round)
  const std::string& as_string() const;
  const Array& as_array() const;
  const Object& as_object() const;
  Array& as_array();
  Object& as_object();

  // Object helpers: find returns nullptr when absent; set replaces or appends.
  const Json* find(std::string_view key) const;
  void set(std::string key, Json value);

  static const char* kind_name(Kind k);

 private:
  Kind kind_ = Kind::null;
  bool negative_ = false;  // integer: sign; magnitude in u_
  std::uint64_t u_ = 0;    // integer magnitude, or boolean
  double d_ = 0;           // number
  std::string s_;          // string
  Array a_;                // array
  Object o_;               // object
};

struct JsonParseOptions {
  int max_depth = 64;  // nesting of arrays and objects
};

// Parses exactly one JSON value, surrounded only by whitespace (space, tab, LF, CR). Rejects invalid
// UTF-8, unescaped control characters, lone surrogates, leading zeros, duplicate object keys, nesting
// deeper than max_depth, and anything after the value.
// Numbers without fraction or exponent whose magnitude fits 64 bits are kept exactly (kind integer);
// all others become doubles.
Json parse_json(std::string_view text, const JsonParseOptions& options = {});

// Compact JSON (no whitespace), object members in their insertion order, so the output is a pure
// function of the value. Strings are emitted as UTF-8 with only '"', '\\' and control characters
// escaped (\b \f \n \r \t, others as \u00XX). Throws std::invalid_argument for a string that is not
// valid UTF-8 and for a non-finite number.
std::string write_json(const Json& value);
void write_json(const Json& value, std::string& out);

// Shared UTF-8 helpers.
bool is_valid_utf8(std::string_view s);
// For messages: s with bytes that are not valid UTF-8 or are control characters shown as \xNN.
std::string printable(std::string_view s);

}  // namespace octopt::detail

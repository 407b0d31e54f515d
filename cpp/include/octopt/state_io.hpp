#pragma once
// State files: named tensors plus string metadata in a safetensors-compatible file, written atomically
// and read back only after everything in it has been validated and checksummed. The layout, keys and
// rules are specified in docs/format.md.
#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace octopt {

inline constexpr const char* kStateFormat = "octopt-state";         // value of metadata key "octopt.format"
inline constexpr int kStateFormatVersion = 1;                       // the version this build writes and reads
inline constexpr std::uint64_t kMaxStateHeaderBytes = 100'000'000;  // as the safetensors reference reader
inline constexpr std::size_t kMaxTensorNameBytes = 1024;

// The file is not a valid state file of a version this build reads: truncated, corrupt (checksum
// mismatch, malformed header), or of an unknown format version. what() names the file, the tensor or
// key, and the problem.
struct FormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An operating-system error on a state file (missing, permission denied, disk full, ...):
// code().value() is the errno value and path() the file concerned.
class FileError : public std::system_error {
 public:
  FileError(int errno_value, const std::string& what, std::string path)
      : std::system_error(errno_value, std::generic_category(), what), path_(std::move(path)) {}
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

// A tensor to be written: `data` points at product(shape) elements of `dtype`, C order, in host byte
// order (little-endian; writing on a big-endian host is refused).
struct TensorView {
  std::string name;                 // non-empty, valid UTF-8, at most kMaxTensorNameBytes bytes, not starting with "__"
  std::string dtype;                // safetensors dtype: F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL
  std::vector<std::int64_t> shape;  // every extent >= 0; {} is a scalar (one element)
  const void* data;                 // may be null when the tensor holds no elements
};

// Bytes per element of a safetensors dtype name, or 0 when octopt does not know it.
std::size_t state_dtype_size(const std::string& dtype);
// The dtype names state files may hold.
const std::vector<std::string>& state_dtypes();

// Writes `tensors` (laid out contiguously in the given order) and `metadata` to `path`, atomically: the
// bytes go to "<path>.tmp-<pid>-<random>" in the same folder, which is fsynced and renamed over `path`,
// and the folder is then fsynced. On any failure the temporary is removed and an existing file at `path`
// is left as it was. A replaced file's permission bits carry over to the new one (owner and group do
// not; a symbolic link at `path` is replaced, not followed). The keys "octopt.format",
// "octopt.format_version" and "octopt.crc32c" belong to this layer and may not appear in `metadata`.
// Throws std::invalid_argument (bad name, dtype, shape or metadata key; names the tensor or key),
// FileError (operating-system error; names the path) or std::runtime_error (big-endian host).
void write_state_file(const std::string& path, const std::vector<TensorView>& tensors,
                      const std::map<std::string, std::string>& metadata);

// A state file read into memory after full validation.
struct StateFile {
  std::map<std::string, std::string> metadata;  // the caller's keys: without the octopt.* keys this layer owns
  struct Tensor {
    std::string name;
    std::string dtype;
    std::vector<std::int64_t> shape;
    std::uint64_t nbytes;
    const std::uint8_t* data;  // into `bytes`; no alignment beyond what the file layout gives
    std::uint32_t crc32c;      // verified against the stored checksum
  };
  std::vector<Tensor> tensors;      // in file (data offset) order
  std::vector<std::uint8_t> bytes;  // the data section; owns what the tensors point into
};

// Reads and validates a state file: the header completely before anything is allocated for the data
// (which is then at most the file's own size), then every checksum.
// Throws FormatError (anything wrong with the file's contents) or FileError (operating-system error).
StateFile read_state_file(const std::string& path);

// A JSON report of what the file holds and what is wrong with it, for humans and tools: sizes, the
// stored metadata, each tensor's dtype, shape, offsets and checksum status ("ok", "bad" or "missing"),
// "valid" (true exactly when read_state_file would succeed) and "error" (what read_state_file would
// report first). Reads the data in bounded chunks. Throws only FileError; never for file contents.
std::string inspect_state_file(const std::string& path);

// CRC-32C (Castagnoli) as stored in state files: crc32c("123456789", 9) == 0xE3069283.
enum class Crc32cImpl { automatic, portable, sse42 };
std::uint32_t crc32c(const void* data, std::size_t size, Crc32cImpl impl = Crc32cImpl::automatic);
bool crc32c_hardware();  // true when `automatic` uses the SSE4.2 instruction

}  // namespace octopt

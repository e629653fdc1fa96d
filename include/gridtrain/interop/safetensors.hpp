// safetensors files (Hugging Face's format, https://huggingface.co/docs/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON ({"name": {"dtype", "shape", "data_offsets":
// [begin, end)}, "__metadata__": {...}}, offsets relative to the byte after the header), then the
// tensors' bytes, row-major, little-endian. The header is parsed with nlohmann-json.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gridtrain {

struct SafeTensorInfo {
  std::string dtype;                ///< "F32", "BF16", "F16" (the ones read); others are refused by read()
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  ///< byte range in the data section
};

class SafetensorsReader {
 public:
  /// Reads and checks path's header. Throws gridtrain::Error naming the file for a file shorter
  /// than its header length, a header length past the end of the file, a header that is not a
  /// JSON object of tensor entries, a dtype of unknown size, a byte range that does not match the
  /// shape, lies past the file (truncated data) or overlaps another tensor's.
  explicit SafetensorsReader(std::string path);
  const std::string& path() const { return path_; }
  const std::map<std::string, SafeTensorInfo>& tensors() const { return tensors_; }
  /// Tensor `name` as fp32 (F32 as stored; BF16 and F16 widened exactly). Throws gridtrain::Error
  /// for a name not in the file and for another dtype.
  std::vector<float> read(const std::string& name) const;

 private:
  std::string path_;
  std::uint64_t data_start_ = 0;
  std::map<std::string, SafeTensorInfo> tensors_;
};

/// One fp32 tensor to write.
struct SafeTensorOut {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> data;  ///< row-major, product(shape) elements
};

/// Writes tensors (F32) and the string metadata to path, the header padded with spaces to a
/// multiple of 8 bytes (so that every tensor starts aligned). Throws gridtrain::Error when path
/// cannot be written.
void write_safetensors(const std::string& path, const std::vector<SafeTensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace gridtrain

#include "gridtrain/interop/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "gridtrain/util/error.hpp"

namespace gridtrain {
namespace {

using json = nlohmann::json;

std::uint64_t dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, std::uint64_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1}, {"U8", 1},
      {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

// IEEE 754 binary16 → binary32, exact (subnormals, Inf and NaN included).
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000 | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0) return std::bit_cast<float>(sign);
    int shift = 0;  // normalize the subnormal
    while ((mantissa & 0x400) == 0) mantissa <<= 1, ++shift;
    mantissa &= 0x3ff;
    exponent = static_cast<std::uint32_t>(1 - shift);
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

SafeTensorInfo parse_entry(const std::string& name, const json& e) {
  if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
    throw Error("tensor '" + name + "': not an object with dtype, shape and data_offsets");
  SafeTensorInfo t;
  t.dtype = e.at("dtype").get<std::string>();
  t.shape = e.at("shape").get<std::vector<std::int64_t>>();
  const auto offsets = e.at("data_offsets").get<std::vector<std::uint64_t>>();
  if (offsets.size() != 2 || offsets[1] < offsets[0])
    throw Error("tensor '" + name + "': data_offsets must be [begin, end] with begin <= end");
  t.begin = offsets[0], t.end = offsets[1];
  const std::uint64_t size = dtype_bytes(t.dtype);
  if (size == 0) throw Error("tensor '" + name + "': unknown dtype '" + t.dtype + "'");
  std::uint64_t elements = 1;
  for (auto d : t.shape) {
    if (d < 0) throw Error("tensor '" + name + "': negative dimension in its shape");
    elements *= static_cast<std::uint64_t>(d);
  }
  if (t.end - t.begin != elements * size)
    throw Error("tensor '" + name + "': data_offsets span " + std::to_string(t.end - t.begin) + " bytes, but " +
                t.dtype + " of its shape needs " + std::to_string(elements * size));
  return t;
}

}  // namespace

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  auto fail = [&](const std::string& what) { return Error(path_ + ": " + what); };
  std::ifstream in(path_, std::ios::binary);
  if (!in) throw fail("cannot open the file");
  const std::uint64_t file_size = std::filesystem::file_size(path_);
  std::uint64_t n = 0;
  unsigned char length[8];
  if (file_size < 8 || !in.read(reinterpret_cast<char*>(length), 8))
    throw fail("truncated: " + std::to_string(file_size) + " bytes, no 8-byte header length");
  for (int i = 7; i >= 0; --i) n = (n << 8) | length[i];
  if (n > file_size - 8)
    throw fail("header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(file_size) +
               " bytes): truncated or not a safetensors file");
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  data_start_ = 8 + n;
  json j;
  try {
    j = json::parse(header);
  } catch (const json::exception& e) {
    throw fail(std::string("the header is not JSON: ") + e.what());
  }
  if (!j.is_object()) throw fail("the header is not a JSON object");
  try {
    for (const auto& [name, e] : j.items())
      if (name != "__metadata__") tensors_[name] = parse_entry(name, e);
  } catch (const json::exception& e) {
    throw fail(std::string("malformed header: ") + e.what());
  } catch (const Error& e) {
    throw fail(e.what());
  }
  std::vector<std::pair<std::uint64_t, std::string>> order;  // by begin: overlaps and the end of data
  for (const auto& [name, t] : tensors_) order.emplace_back(t.begin, name);
  std::sort(order.begin(), order.end());
  std::uint64_t end = 0;
  std::string previous;
  for (const auto& [begin, name] : order) {
    const auto& t = tensors_.at(name);
    if (begin < end && t.end > t.begin)
      throw fail("tensors '" + previous + "' and '" + name + "' overlap (bytes " + std::to_string(begin) + ".." +
                 std::to_string(end) + ")");
    if (data_start_ + t.end > file_size)
      throw fail("truncated: tensor '" + name + "' ends at byte " + std::to_string(data_start_ + t.end) +
                 " of a file of " + std::to_string(file_size));
    if (t.end > end) end = t.end, previous = name;
  }
}

std::vector<float> SafetensorsReader::read(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) throw Error(path_ + ": no tensor '" + name + "'");
  const SafeTensorInfo& t = it->second;
  const std::uint64_t size = dtype_bytes(t.dtype), count = (t.end - t.begin) / size;
  if (t.dtype != "F32" && t.dtype != "BF16" && t.dtype != "F16")
    throw Error(path_ + ": tensor '" + name + "' is " + t.dtype + "; valid: F32, BF16, F16");
  std::vector<unsigned char> bytes(t.end - t.begin);
  std::ifstream in(path_, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(data_start_ + t.begin));
  if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size())))
    throw Error(path_ + ": cannot read tensor '" + name + "'");
  std::vector<float> out(count);
  for (std::uint64_t i = 0; i < count; ++i) {  // little-endian, as the format defines
    const unsigned char* b = bytes.data() + i * size;
    if (t.dtype == "F32") out[i] = std::bit_cast<float>(b[0] | b[1] << 8 | b[2] << 16 | std::uint32_t{b[3]} << 24);
    else if (t.dtype == "BF16") out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(b[0] | b[1] << 8) << 16);
    else out[i] = half_to_float(static_cast<std::uint16_t>(b[0] | b[1] << 8));
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<SafeTensorOut>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    const std::uint64_t bytes = t.data.size() * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  out.write(reinterpret_cast<const char*>(length), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
  for (const auto& t : tensors)
    out.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size() * sizeof(float)));
  out.close();
  if (!out) throw Error(path + ": cannot write the file");
}

}  // namespace gridtrain

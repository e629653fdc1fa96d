// The tokenizer a checkpoint carries: /tokenizer (name, model), or the /data attribute of older files.
#include "gridtrain/checkpoint/tokenizer_record.hpp"

namespace gridtrain {

std::optional<TokenizerRecord> read_tokenizer_record(const CheckpointFile& file) {
  const hid_t root = file.root();
  const bool model = file.exists("/tokenizer/model");
  if (model) {
    H5Id group(H5Gopen2(root, "/tokenizer", H5P_DEFAULT), "cannot open /tokenizer");
    if (h5_has_attr(group, "name"))
      return TokenizerRecord{h5_read_attr_string(group, "name"), h5_read_bytes(root, "/tokenizer/model")};
  }
  if (H5Lexists(root, "/data", H5P_DEFAULT) <= 0) return std::nullopt;  // imported weights
  H5Id data(H5Gopen2(root, "/data", H5P_DEFAULT), "cannot open /data");
  // Files from before the tokenizer was recorded were all byte-level.
  const std::string name = h5_has_attr(data, "tokenizer") ? h5_read_attr_string(data, "tokenizer") : "bytes";
  if (name == "none") return std::nullopt;
  return TokenizerRecord{name, model ? h5_read_bytes(root, "/tokenizer/model") : ""};
}

void write_tokenizer_name(const CheckpointFile& file, const std::string& name) {
  H5Id group(H5Gopen2(file.root(), "/tokenizer", H5P_DEFAULT), "cannot open /tokenizer");
  h5_write_attr(group, "name", name);
}

std::string describe(const TokenizerRecord& t) {
  return t.name + (t.model.empty() ? "" : " (a model of " + std::to_string(t.model.size()) + " bytes)");
}

}  // namespace gridtrain

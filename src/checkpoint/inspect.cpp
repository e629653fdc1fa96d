#include "gridtrain/checkpoint/inspect.hpp"

#include <cstdio>
#include <vector>

#include "gridtrain/checkpoint/checkpoint_file.hpp"
#include "gridtrain/util/error.hpp"

namespace gridtrain {
namespace {

struct Entry {
  std::string name;
  std::vector<hsize_t> shape;
  std::string dtype;
  bool checksum_ok;
};

#if H5_VERSION_GE(1, 12, 0)
using ObjectInfo = H5O_info2_t;
#else
using ObjectInfo = H5O_info_t;
#endif

herr_t collect(hid_t, const char* name, const ObjectInfo* info, void* out) {
  if (info->type != H5O_TYPE_DATASET) return 0;
  static_cast<std::vector<std::string>*>(out)->push_back(std::string("/") + name);
  return 0;
}

}  // namespace

int inspect_checkpoint(const std::string& path, Log& log) {
  std::vector<Entry> entries;
  std::string header;
  try {
    auto file = CheckpointFile::open(path, MPI_COMM_SELF);
    const hid_t root = file.root();
    if (!h5_has_attr(root, "format") || h5_read_attr_string(root, "format") != "gridtrain-checkpoint")
      throw Error("'" + path + "' is not a gridtrain checkpoint (no format = gridtrain-checkpoint attribute)");
    header = "Checkpoint " + path + "\n  format version " + std::to_string(h5_read_attr_int(root, "version")) +
             ", written by " + h5_read_attr_string(root, "created_by") + "\n  step " +
             std::to_string(h5_read_attr_int(root, "step")) + ", tokens seen " +
             std::to_string(h5_read_attr_int(root, "tokens_seen")) + ", grid (dp,tp,pp) = " +
             h5_read_attr_string(root, "grid") + "\n\nDeck:\n" + h5_read_attr_string(root, "deck") + "\n";
    std::vector<std::string> names;
#if H5_VERSION_GE(1, 12, 0)
    H5Ovisit3(root, H5_INDEX_NAME, H5_ITER_NATIVE, collect, &names, H5O_INFO_BASIC);
#else
    H5Ovisit(root, H5_INDEX_NAME, H5_ITER_NATIVE, collect, &names);
#endif
    for (const auto& name : names) {
      const auto shape = file.shape_of(name);
      H5Id ds(H5Dopen2(root, name.c_str(), H5P_DEFAULT), "open " + name);
      H5Id type(H5Dget_type(ds), "type " + name);
      const DType t = H5Tget_class(type) == H5T_FLOAT ? DType::F32 : DType::U8;
      std::vector<unsigned char> buf(Slab::all(shape).elements() * dtype_size(t));
      bool ok = true;
      try {
        file.read(name, t, shape, Slab::all(shape), buf.data());
      } catch (const std::runtime_error&) {  // unreadable or checksum mismatch: reported as BAD
        ok = false;
      }
      entries.push_back({name, shape, t == DType::F32 ? "float32" : "uint8", ok});
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("inspect: " + std::string(e.what()));
  }
  log.print(header);
  char line[256];
  std::snprintf(line, sizeof line, "%-44s %-20s %-8s %s\n", "Dataset", "Shape", "Dtype", "Checksum");
  log.print(line);
  int bad = 0;
  for (const auto& e : entries) {
    std::snprintf(line, sizeof line, "%-44s %-20s %-8s %s\n", e.name.c_str(), shape_text(e.shape).c_str(), e.dtype.c_str(),
                  e.checksum_ok ? "ok" : "BAD");
    log.print(line);
    bad += e.checksum_ok ? 0 : 1;
  }
  log.print(std::to_string(entries.size()) + " datasets, " + std::to_string(bad) + " with a bad checksum\n");
  return bad == 0 ? 0 : kExitError;
}

}  // namespace gridtrain

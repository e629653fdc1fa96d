#include "gridtrain/checkpoint/inspect.hpp"

#include <algorithm>
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
  double zeros;  // fraction of elements exactly 0 (float32 datasets; -1 otherwise): sparse weights and masks
};

}  // namespace

int inspect_checkpoint(const std::string& path, Log& log) {
  std::vector<Entry> entries;
  std::string header;
  try {
    auto file = CheckpointFile::open(path, MPI_COMM_SELF);
    const hid_t root = file.root();
    file.check_header();
    header = "Checkpoint " + path + "\n  format version " + std::to_string(h5_read_attr_int(root, "version")) +
             ", written by " + h5_read_attr_string(root, "created_by") + "\n  step " +
             std::to_string(h5_read_attr_int(root, "step")) + ", tokens seen " +
             std::to_string(h5_read_attr_int(root, "tokens_seen")) + ", grid (dp,tp,pp,ep,cp) = " +
             h5_read_attr_string(root, "grid") + "\n";
    if (h5_has_attr(root, "run_id")) header += "  run " + h5_read_attr_string(root, "run_id");
    if (h5_has_attr(root, "branched_from")) {  // "<run_id>@<step>"
      const std::string from = h5_read_attr_string(root, "branched_from");
      header += " (branched from run " + from.substr(0, from.find('@')) + " at step " + from.substr(from.find('@') + 1) + ")";
    }
    if (h5_has_attr(root, "slurm_job")) header += ", Slurm job " + h5_read_attr_string(root, "slurm_job");
    header += "\n\nDeck:\n" + h5_read_attr_string(root, "deck") + "\n";
    for (const auto& name : file.datasets()) {
      const auto shape = file.shape_of(name);
      const DType t = file.dtype_of(name);
      bool ok = true;
      double zeros = -1;
      try {
        if (t == DType::F32) {  // read whole (checksum verified), zeros counted
          hsize_t n = 1;
          for (const auto d : shape) n *= d;
          std::vector<float> values(n);
          file.read(name, t, shape, Slab::all(shape), values.data());
          zeros = n == 0 ? 0.0 : static_cast<double>(std::count(values.begin(), values.end(), 0.0f)) / static_cast<double>(n);
        } else {
          file.verify(name);
        }
      } catch (const std::runtime_error&) {  // unreadable or checksum mismatch: reported as BAD
        ok = false;
      }
      entries.push_back({name, shape, t == DType::F32 ? "float32" : "uint8", ok, zeros});
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("inspect: " + std::string(e.what()));
  }
  log.print(header);
  char line[256];
  std::snprintf(line, sizeof line, "%-44s %-20s %-8s %7s %s\n", "Dataset", "Shape", "Dtype", "Zeros%", "Checksum");
  log.print(line);
  int bad = 0;
  for (const auto& e : entries) {
    char zeros[16] = "      -";
    if (e.zeros >= 0) std::snprintf(zeros, sizeof zeros, "%7.2f", 100.0 * e.zeros);
    std::snprintf(line, sizeof line, "%-44s %-20s %-8s %s %s\n", e.name.c_str(), shape_text(e.shape).c_str(),
                  e.dtype.c_str(), zeros, e.checksum_ok ? "ok" : "BAD");
    log.print(line);
    bad += e.checksum_ok ? 0 : 1;
  }
  log.print(std::to_string(entries.size()) + " datasets, " + std::to_string(bad) + " with a bad checksum\n");
  return bad == 0 ? 0 : kExitError;
}

}  // namespace gridtrain

#include "gridtrain/data/prepare_idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <sstream>
#include <vector>

#include "gridtrain/comm/agree.hpp"
#include "gridtrain/data/prepare.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/sha256.hpp"
#include "gridtrain/util/h5.hpp"

namespace gridtrain {
namespace {

struct Idx {
  std::vector<std::uint64_t> dims;
  std::string data;  // row-major unsigned bytes
};

// gzread reads plain files as they are, so one reader serves .gz and uncompressed IDX.
Idx read_idx(const std::string& path) {
  std::unique_ptr<gzFile_s, int (*)(gzFile)> in(gzopen(path.c_str(), "rb"), gzclose);
  if (!in) throw Error("cannot open '" + path + "'");
  auto read = [&](void* out, unsigned n) {
    const int got = gzread(in.get(), out, n);
    int code = Z_OK;
    const char* why = gzerror(in.get(), &code);
    if (got < 0 || code != Z_OK) throw Error("reading '" + path + "' failed: " + why + " (a corrupt .gz?)");
    if (got != static_cast<int>(n)) throw Error("'" + path + "' is shorter than its IDX header says");
  };
  unsigned char magic[4];
  read(magic, 4);
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] < 1 || magic[3] > 4)
    throw Error("'" + path + "' is not an IDX file of unsigned bytes (magic 00 00 08 <rank 1-4>)");
  Idx idx;
  std::uint64_t total = 1;
  for (int i = 0; i < magic[3]; ++i) {
    unsigned char be[4];
    read(be, 4);
    idx.dims.push_back((std::uint64_t{be[0]} << 24) | (std::uint64_t{be[1]} << 16) | (std::uint64_t{be[2]} << 8) | be[3]);
    total *= idx.dims.back();
  }
  idx.data.resize(total);
  for (std::uint64_t at = 0; at < total;) {  // gzread takes at most INT_MAX bytes a call
    const auto n = static_cast<unsigned>(std::min<std::uint64_t>(total - at, 1u << 30));
    read(idx.data.data() + at, n);
    at += n;
  }
  return idx;
}

// Images as (N, C, H, W) and their labels, checked against each other.
std::vector<std::uint64_t> image_dims(const Idx& images, const Idx& labels, const std::string& images_path,
                                      const std::string& labels_path) {
  auto d = images.dims;
  if (d.size() == 3) d.insert(d.begin() + 1, 1);  // (N, H, W): one channel
  if (d.size() != 4) throw Error("'" + images_path + "' holds rank-" + std::to_string(images.dims.size()) +
                                 " data; images are rank 3 (N, H, W) or 4 (N, C, H, W)");
  if (labels.dims.size() != 1 || labels.dims[0] != d[0])
    throw Error("'" + labels_path + "' does not hold one label per image of '" + images_path + "' (" +
                std::to_string(d[0]) + ")");
  if (d[0] == 0) throw Error("'" + images_path + "' holds no images");
  return d;
}

void write_u8(hid_t file, const std::string& name, const std::vector<std::uint64_t>& dims, const std::string& bytes) {
  const std::vector<hsize_t> extent(dims.begin(), dims.end());
  H5Id space(H5Screate_simple(static_cast<int>(extent.size()), extent.data(), nullptr), "H5Screate_simple");
  H5Id lcpl(H5Pcreate(H5P_LINK_CREATE), "H5Pcreate");
  H5Pset_create_intermediate_group(lcpl, 1);
  H5Id ds(H5Dcreate2(file, name.c_str(), H5T_STD_U8LE, space, lcpl, H5P_DEFAULT, H5P_DEFAULT),
          "cannot create dataset " + name);
  if (H5Dwrite(ds, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) < 0)
    throw std::runtime_error("cannot write " + name);
}

IdxReport convert(const IdxOptions& o) {
  const Idx sets[4] = {read_idx(o.images), read_idx(o.labels), read_idx(o.test_images), read_idx(o.test_labels)};
  const auto train = image_dims(sets[0], sets[1], o.images, o.labels);
  const auto test = image_dims(sets[2], sets[3], o.test_images, o.test_labels);
  auto shape = [](const std::vector<std::uint64_t>& d) {
    return std::to_string(d[1]) + "x" + std::to_string(d[2]) + "x" + std::to_string(d[3]);
  };
  if (!std::equal(train.begin() + 1, train.end(), test.begin() + 1))
    throw Error("'" + o.images + "' holds " + shape(train) + " images and '" + o.test_images + "' " + shape(test) +
                " (C x H x W); they must match");
  IdxReport r;
  r.train = train[0];
  r.test = test[0];
  r.channels = static_cast<int>(train[1]);
  r.height = static_cast<int>(train[2]);
  r.width = static_cast<int>(train[3]);
  std::vector<std::uint64_t> count(256);
  for (int i : {1, 3}) {
    const std::string& file = i == 1 ? o.labels : o.test_labels;
    for (std::size_t k = 0; k < sets[i].data.size(); ++k) {
      const auto l = static_cast<unsigned char>(sets[i].data[k]);
      if (o.classes > 0 && l >= o.classes)
        throw Error("'" + file + "' holds label " + std::to_string(l) + " at index " + std::to_string(k) +
                    "; --classes " + std::to_string(o.classes) + " allows 0.." + std::to_string(o.classes - 1));
      ++count[l];
      r.classes = std::max(r.classes, l + 1);
    }
  }
  if (o.classes > 0) r.classes = o.classes;
  for (int l = 0; l < r.classes; ++l)
    if (count[static_cast<std::size_t>(l)] == 0) r.unused.push_back(l);
  if (r.classes < 2)
    throw Error("'" + o.labels + "' and '" + o.test_labels + "' hold one class (label 0) only; a classifier needs "
                "at least 2");
  r.sha256 = sha256_hex(sets[0].data + sets[1].data + sets[2].data + sets[3].data);
  const std::string tmp = o.output + ".tmp";
  try {
    h5_silence_errors();
    H5Id file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), "cannot create the file");
    write_u8(file, "/train/images", train, sets[0].data);
    write_u8(file, "/train/labels", sets[1].dims, sets[1].data);
    write_u8(file, "/test/images", test, sets[2].data);
    write_u8(file, "/test/labels", sets[3].dims, sets[3].data);
    h5_write_attr(file, "format", std::string("gridtrain-images"));
    h5_write_attr(file, "classes", static_cast<long long>(r.classes));
    h5_write_attr(file, "sha256", r.sha256);
    h5_write_attr(file, "source", std::filesystem::path(o.images).filename().string());
  } catch (const std::runtime_error& e) {
    std::filesystem::remove(tmp);
    throw Error("writing '" + o.output + "': " + e.what() + " " + h5_error_detail());
  }
  std::filesystem::rename(tmp, o.output);
  return r;
}

// The report as text for the other ranks.
std::string to_text(const IdxReport& r) {
  std::ostringstream out;
  out << r.train << ' ' << r.test << ' ' << r.channels << ' ' << r.height << ' ' << r.width << ' ' << r.classes << ' '
      << r.sha256;
  for (const int l : r.unused) out << ' ' << l;
  return out.str();
}

}  // namespace

IdxReport prepare_idx(const IdxOptions& o, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string text;
  agree(comm, [&] {
    if (rank == 0) text = to_text(convert(o));
  });
  std::istringstream in(broadcast_text(text, comm));
  IdxReport r;
  in >> r.train >> r.test >> r.channels >> r.height >> r.width >> r.classes >> r.sha256;
  for (int l = 0; in >> l;) r.unused.push_back(l);
  return r;
}

}  // namespace gridtrain

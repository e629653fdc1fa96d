#include "gridtrain/data/image_data.hpp"

#include <filesystem>
#include <sstream>
#include <vector>

#include "gridtrain/comm/agree.hpp"
#include "gridtrain/data/dataset_part.hpp"
#include "gridtrain/data/sampler.hpp"
#include "gridtrain/util/error.hpp"

namespace gridtrain {
namespace {

constexpr const char* kSets[4] = {"/train/images", "/train/labels", "/test/images", "/test/labels"};

// The metadata rank 0 reads, as text for the others: "classes C H W sha256\n" then per dataset
// "offset elements width signed\n" (the file is data.path).
struct Meta {
  int classes = 0, channels = 0, height = 0, width = 0;
  std::string sha256;
  StoredIntegers::Part parts[4];
};

std::string to_text(const Meta& m) {
  std::ostringstream out;
  out << m.classes << ' ' << m.channels << ' ' << m.height << ' ' << m.width << ' ' << (m.sha256.empty() ? "-" : m.sha256)
      << '\n';
  for (const auto& p : m.parts) out << p.offset << ' ' << p.count << ' ' << p.width << ' ' << p.is_signed << '\n';
  return out.str();
}

Meta from_text(const std::string& text, const std::string& file) {
  std::istringstream in(text);
  Meta m;
  in >> m.classes >> m.channels >> m.height >> m.width >> m.sha256;
  if (m.sha256 == "-") m.sha256.clear();
  for (auto& p : m.parts) {
    in >> p.offset >> p.count >> p.width >> p.is_signed;
    p.file = file;
  }
  return m;
}

Meta describe(const std::string& path) {
  if (H5Fis_hdf5(path.c_str()) <= 0) throw Error("not an HDF5 file (write one with `gridtrain prepare idx`)");
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "cannot open the file");
  Meta m;
  const long long classes = h5_read_attr_int(file, "classes");
  if (classes < 2 || classes > (1 << 30))
    throw Error("classes = " + std::to_string(classes) + "; valid: 2 .. " + std::to_string(1 << 30));
  m.classes = static_cast<int>(classes);
  m.sha256 = h5_has_attr(file, "sha256") ? h5_read_attr_string(file, "sha256") : "";
  std::vector<std::uint64_t> dims[4];
  for (int i = 0; i < 4; ++i) m.parts[i] = dataset_part(file, path, kSets[i], dims[i]);
  for (int i : {0, 2}) {
    const std::string images = kSets[i], labels = kSets[i + 1];
    if (dims[i].size() != 4)
      throw Error(images + " is " + std::to_string(dims[i].size()) + "-D; images are 4-D (N, C, H, W)");
    if (m.parts[i].width != 1 || m.parts[i].is_signed) throw Error(images + " is not uint8 pixels");
    if (dims[i + 1].size() != 1 || dims[i + 1][0] != dims[i][0])
      throw Error(labels + " is not 1-D with one label per image of " + images + " (" + std::to_string(dims[i][0]) + ")");
    if (dims[i][0] == 0) throw Error(images + " holds no images");
  }
  auto chw = [](const std::vector<std::uint64_t>& d) {
    return "(" + std::to_string(d[1]) + ", " + std::to_string(d[2]) + ", " + std::to_string(d[3]) + ")";
  };
  if (dims[0][1] != dims[2][1] || dims[0][2] != dims[2][2] || dims[0][3] != dims[2][3])
    throw Error("/train/images is " + chw(dims[0]) + " and /test/images " + chw(dims[2]) + " in (C, H, W); they must match");
  m.channels = static_cast<int>(dims[0][1]);
  m.height = static_cast<int>(dims[0][2]);
  m.width = static_cast<int>(dims[0][3]);
  return m;
}

}  // namespace

ImageData load_images(const std::string& path, MPI_Comm comm, const std::string& prepare_hint) {
  const std::string where = "data.path = '" + path + "': ";
  h5_silence_errors();
  int rank = 0, ranks = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  std::string text;
  agree(comm, [&] {
    if (rank != 0) return;
    if (!std::filesystem::is_regular_file(path)) throw Error(where + "file not found. " + prepare_hint);
    try {
      text = to_text(describe(path));
    } catch (const Error& e) {
      throw Error(where + e.what());
    } catch (const std::runtime_error& e) {
      throw Error(where + e.what() + "; expected the layout of `gridtrain prepare idx` (/train/images, /train/labels, "
                  "/test/images, /test/labels, attribute classes)");
    }
  });
  const Meta m = from_text(broadcast_text(text, comm), path);
  ImageData d;
  d.file = path;
  d.sha256 = m.sha256;
  d.classes = m.classes;
  d.channels = m.channels;
  d.height = m.height;
  d.width = m.width;
  agree(comm, [&] {
    ImageSplit* splits[2] = {&d.train, &d.test};
    for (int i = 0; i < 2; ++i) {
      splits[i]->pixels = StoredIntegers({m.parts[2 * i]});
      splits[i]->labels = StoredIntegers({m.parts[2 * i + 1]});
      splits[i]->count = m.parts[2 * i + 1].count;
      const auto [begin, end] = share(splits[i]->count, rank, ranks);  // every label checked once
      if (const auto bad = splits[i]->labels.first_outside(begin, end, d.classes); !bad.empty())
        throw Error(where + kSets[2 * i + 1] + " holds label " + bad + " outside [0, classes = " +
                    std::to_string(d.classes) + ")");
    }
  });
  return d;
}

void copy_image(const ImageData& d, const ImageSplit& split, std::uint64_t i, int dy, int dx, std::int64_t* out) {
  const std::int64_t n = d.pixels();
  std::vector<std::int32_t> image(static_cast<std::size_t>(n));
  split.pixels.read(i * static_cast<std::uint64_t>(n), image.size(), image.data());
  const int H = d.height, W = d.width;
  for (int c = 0; c < d.channels; ++c)
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        const int sy = y + dy, sx = x + dx;
        const bool inside = sy >= 0 && sy < H && sx >= 0 && sx < W;
        *out++ = inside ? image[static_cast<std::size_t>((c * H + sy) * W + sx)] : 0;
      }
  std::int32_t label = 0;
  split.labels.read(i, 1, &label);
  *out = label;
}

}  // namespace gridtrain

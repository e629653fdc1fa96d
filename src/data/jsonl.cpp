#include "gridtrain/data/jsonl.hpp"

#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "gridtrain/util/error.hpp"

namespace gridtrain {

// The decompressed bytes of the file, a chunk at a time.
struct JsonlReader::Source {
  virtual ~Source() = default;
  /// Up to n bytes into out; 0 at the end.
  virtual std::size_t read(char* out, std::size_t n) = 0;
};

namespace {

class Plain : public JsonlReader::Source {
 public:
  explicit Plain(const std::string& file) : in_(file, std::ios::binary) {
    if (!in_) throw Error(file + ": cannot open: " + std::strerror(errno));
  }
  std::size_t read(char* out, std::size_t n) override {
    in_.read(out, static_cast<std::streamsize>(n));
    return static_cast<std::size_t>(in_.gcount());
  }

 private:
  std::ifstream in_;
};

// gzip through zlib's gzread (which also reads a file that is not compressed, as is).
class Gzip : public JsonlReader::Source {
 public:
  explicit Gzip(const std::string& file) : file_(file), gz_(gzopen(file.c_str(), "rb")) {
    if (!gz_) throw Error(file + ": cannot open: " + std::strerror(errno));
  }
  ~Gzip() override { gzclose(gz_); }
  std::size_t read(char* out, std::size_t n) override {
    const int got = gzread(gz_, out, static_cast<unsigned>(n));
    int code = Z_OK;
    const char* why = gzerror(gz_, &code);
    // gzread passes a file that is not gzip through as it is (gzdirect), and reports a stream cut
    // short only through gzerror (Z_BUF_ERROR) while returning what it has.
    if (gzdirect(gz_)) throw Error(file_ + ": not gzip (no gzip header), though named .gz");
    if (got < 0 || (code != Z_OK && code != Z_STREAM_END))
      throw Error(file_ + ": damaged gzip stream: " + why + (code == Z_BUF_ERROR ? " (truncated)" : ""));
    return static_cast<std::size_t>(got);
  }

 private:
  std::string file_;
  gzFile gz_;
};

// Zstandard through libzstd's streaming decompression.
class Zstd : public JsonlReader::Source {
 public:
  explicit Zstd(const std::string& file) : file_(file), in_(file, std::ios::binary), stream_(ZSTD_createDStream()) {
    if (!in_) throw Error(file + ": cannot open: " + std::strerror(errno));
    compressed_.resize(ZSTD_DStreamInSize());
  }
  ~Zstd() override { ZSTD_freeDStream(stream_); }
  std::size_t read(char* out, std::size_t n) override {
    ZSTD_outBuffer o{out, n, 0};
    while (o.pos == 0) {
      if (input_.pos == input_.size) {  // refill
        in_.read(compressed_.data(), static_cast<std::streamsize>(compressed_.size()));
        input_ = {compressed_.data(), static_cast<std::size_t>(in_.gcount()), 0};
        if (input_.size == 0) {
          if (last_ != 0) throw Error(file_ + ": the Zstandard stream ends inside a frame (truncated)");
          return 0;
        }
      }
      last_ = ZSTD_decompressStream(stream_, &o, &input_);
      if (ZSTD_isError(last_)) throw Error(file_ + ": damaged Zstandard stream: " + ZSTD_getErrorName(last_));
    }
    return o.pos;
  }

 private:
  std::string file_;
  std::ifstream in_;
  ZSTD_DStream* stream_;
  std::string compressed_;
  ZSTD_inBuffer input_{nullptr, 0, 0};
  std::size_t last_ = 0;  // 0: the last frame is complete
};

// A parser message fit for a terminal: at most 240 bytes (it quotes what it last read, which can
// be a whole line), bytes outside printable ASCII as \xNN.
std::string printable(const std::string& text) {
  std::string out;
  std::size_t i = 0;
  for (; i < text.size() && out.size() < 240; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    }
  }
  return i < text.size() ? out + "..." : out;
}

}  // namespace

JsonlReader::JsonlReader(std::string file, std::string key) : file_(std::move(file)), key_(std::move(key)) {
  if (file_.ends_with(".gz")) source_ = std::make_unique<Gzip>(file_);
  else if (file_.ends_with(".zst")) source_ = std::make_unique<Zstd>(file_);
  else source_ = std::make_unique<Plain>(file_);
}

JsonlReader::~JsonlReader() = default;

bool JsonlReader::read_line() {
  for (;;) {
    line_text_.clear();
    bool got = false;
    while (!got) {
      if (at_ == buffer_.size()) {
        if (eof_) break;
        buffer_.resize(1 << 20);
        buffer_.resize(source_->read(buffer_.data(), buffer_.size()));
        at_ = 0;
        if (buffer_.empty()) {
          eof_ = true;
          break;
        }
      }
      const std::size_t nl = buffer_.find('\n', at_);
      const std::size_t end = nl == std::string::npos ? buffer_.size() : nl;
      line_text_.append(buffer_, at_, end - at_);
      at_ = nl == std::string::npos ? buffer_.size() : nl + 1;
      got = nl != std::string::npos;
    }
    if (!got && line_text_.empty()) return false;
    ++line_;
    if (line_text_.find_first_not_of(" \t\r") != std::string::npos) return true;
  }
}

bool JsonlReader::skip() { return read_line(); }

bool JsonlReader::next(std::string& text) {
  if (!read_line()) return false;
  const std::string where = file_ + ":" + std::to_string(line_) + ": ";
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(line_text_);
  } catch (const nlohmann::json::exception& e) {  // parse_error, out_of_range (a number like 1e999)
    throw Error(where + "not JSON (" + printable(e.what()) + ")");
  }
  if (!doc.is_object()) throw Error(where + "a JSON " + doc.type_name() + ", not an object {\"" + key_ + "\": \"...\"}");
  const auto value = doc.find(key_);
  if (value == doc.end()) throw Error(where + "no key \"" + key_ + "\" (--json-key)");
  if (!value->is_string())
    throw Error(where + "\"" + key_ + "\" is a JSON " + value->type_name() + ", not a string");
  text = value->get<std::string>();
  return true;
}

}  // namespace gridtrain

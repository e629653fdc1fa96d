// JSON Lines documents (https://jsonlines.org), as Megatron-LM's tools/preprocess_data.py reads
// them: one JSON object per line, the document's text a string under a key (--json-key, "text").
// Plain, gzip or Zstandard by the file name's ending (.gz: zlib; .zst: libzstd), decompressed as a
// stream, so memory does not grow with the file. Lines that are empty or only whitespace are
// skipped; they hold no document.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace gridtrain {

class JsonlReader {
 public:
  /// Opens file. Throws gridtrain::Error naming it when it cannot be opened.
  JsonlReader(std::string file, std::string key);
  ~JsonlReader();
  JsonlReader(const JsonlReader&) = delete;
  JsonlReader& operator=(const JsonlReader&) = delete;

  /// Passes over the next document without parsing it (one not this rank's); false at the end.
  bool skip();
  /// The next document's text into `text`; false at the end. Throws gridtrain::Error "FILE:LINE:
  /// ..." for a line that is not JSON (nlohmann's message: invalid UTF-8 among its causes), not an
  /// object, lacks the key, or whose value is not a string; and for a damaged compressed stream.
  bool next(std::string& text);
  /// The 1-based number of the line last read.
  std::uint64_t line() const { return line_; }

  struct Source;  ///< the file's decompressed bytes (jsonl.cpp)

 private:
  bool read_line();  // the next non-blank line into line_text_
  std::unique_ptr<Source> source_;
  std::string file_, key_, line_text_, buffer_;
  std::size_t at_ = 0;  // next unread byte of buffer_
  std::uint64_t line_ = 0;
  bool eof_ = false;
};

}  // namespace gridtrain

// libgridtrain_sentencepiece.so: SentencePiece behind a C interface, loaded by data/tokenizer.cpp
// with dlopen(RTLD_LOCAL | RTLD_DEEPBIND). Debian's libsentencepiece carries its own copy of
// protobuf-lite and exports its symbols, while LibTorch pulls in libprotobuf: linked into one
// program the two interpose and crash at start-up. Loaded this way, the plugin and
// libsentencepiece resolve their own symbols first and stay out of the program's global scope.
// Results come back through a sink callback; errors as a message (nullptr: success).
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

namespace {

using Sink = void (*)(void* ctx, const void* data, std::size_t bytes);

const char* failed(const sentencepiece::util::Status& status) {
  if (status.ok()) return nullptr;
  thread_local std::string message;
  message = status.ToString();
  return message.c_str();
}

}  // namespace

extern "C" {

const char* gt_spm_load(const char* model, std::size_t bytes, void** handle) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  if (const char* error = failed(sp->LoadFromSerializedProto(std::string(model, bytes)))) {
    delete sp;
    return error;
  }
  *handle = sp;
  return nullptr;
}

void gt_spm_free(void* handle) { delete static_cast<sentencepiece::SentencePieceProcessor*>(handle); }

int gt_spm_vocab(void* handle) { return static_cast<sentencepiece::SentencePieceProcessor*>(handle)->GetPieceSize(); }

const char* gt_spm_encode(void* handle, const char* text, std::size_t bytes, Sink sink, void* ctx) {
  std::vector<int> ids;
  if (const char* error = failed(static_cast<sentencepiece::SentencePieceProcessor*>(handle)->Encode(
          std::string(text, bytes), &ids)))
    return error;
  sink(ctx, ids.data(), ids.size() * sizeof(int));
  return nullptr;
}

const char* gt_spm_decode(void* handle, const std::int32_t* ids, std::size_t n, Sink sink, void* ctx) {
  std::string text;
  if (const char* error = failed(static_cast<sentencepiece::SentencePieceProcessor*>(handle)->Decode(
          std::vector<int>(ids, ids + n), &text)))
    return error;
  sink(ctx, text.data(), text.size());
  return nullptr;
}

// Trains a model with the options given as "key=value" lines.
const char* gt_spm_train(const char* options, Sink sink, void* ctx) {
  std::unordered_map<std::string, std::string> kwargs;
  std::string line;
  for (const char* p = options;; ++p) {
    if (*p == '\n' || *p == '\0') {
      if (const auto eq = line.find('='); eq != std::string::npos) kwargs[line.substr(0, eq)] = line.substr(eq + 1);
      line.clear();
      if (*p == '\0') break;
    } else {
      line += *p;
    }
  }
  std::string model;
  if (const char* error = failed(sentencepiece::SentencePieceTrainer::Train(kwargs, nullptr, &model))) return error;
  sink(ctx, model.data(), model.size());
  return nullptr;
}

}  // extern "C"

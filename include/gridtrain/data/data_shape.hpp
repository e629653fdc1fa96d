// What the data fix about a model: a token corpus's vocabulary, or an image set's shape and
// classes. Torch-free: the launch plan, --dry-run and predict use it.
#pragma once

namespace gridtrain {

/// 0 where a field does not apply.
struct DataShape {
  int vocab_size = 0;
  int eod_token = -1;  ///< a token corpus's end-of-document id (data.eod_token, or what it records); -1: none
  int channels = 0, height = 0, width = 0, classes = 0;
};

}  // namespace gridtrain

// data.split: the weights of Megatron's train, validation and test splits ("969,30,1"), parsed
// where the deck key checks them and where data/indexed_dataset.hpp splits a dataset by them.
#pragma once
#include <array>
#include <string>

namespace gridtrain {

/// The three weights of text, missing trailing ones 0 (Megatron's --split). Throws
/// gridtrain::Error "data.split = 'TEXT': ..." naming the item when text is not 1 to 3
/// comma-separated non-negative decimal numbers with a positive sum.
std::array<double, 3> split_weights(const std::string& text);

}  // namespace gridtrain

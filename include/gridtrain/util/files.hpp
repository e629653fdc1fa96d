// Small-file helpers with the durability that restart files need.
#pragma once
#include <filesystem>
#include <string>

namespace gridtrain {

/// Replaces path's content with text atomically and durably: path.tmp is written and fsync'd,
/// renamed over path, and the directory fsync'd, so a crash leaves the old or the new content,
/// never a mix. On failure removes path.tmp, leaves path as it was and throws std::system_error
/// naming the file and the OS error (e.g. "No space left on device").
void replace_file(const std::filesystem::path& path, const std::string& text);

/// Writes, fsyncs and removes a 64 KiB probe file (.gridtrain-probe) in dir; returns the errno
/// of the first step that fails, 0 when all succeed. Says what the OS thinks of writing there:
/// ENOSPC, EROFS, EACCES, EIO, ENOENT.
int probe_write(const std::filesystem::path& dir);

}  // namespace gridtrain

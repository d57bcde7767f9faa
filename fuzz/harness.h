// File: harness.h
// What the fuzz targets share: a per-process scratch file for entry points that take a
// path (load_recipe_file, SafetensorsFile::open, open_fixture), created once with
// mkstemps in $TMPDIR (else /dev/shm, else /tmp), rewritten for every input and removed
// at exit; the switch for detours around known bugs; and the abort that turns a failed
// property of accepted input into a libFuzzer crash report.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace dsaf::fuzz {

class ScratchFile {
 public:
  explicit ScratchFile(const char* suffix) {
    const char* dir = std::getenv("TMPDIR");
    if (dir == nullptr || *dir == '\0') dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    path_ = std::string(dir) + "/dsaf_fuzz_XXXXXX" + suffix;
    const int fd = mkstemps(path_.data(), static_cast<int>(std::char_traits<char>::length(suffix)));
    if (fd < 0) {
      std::perror("dsaf fuzz: mkstemps");
      std::abort();
    }
    ::close(fd);
  }
  ~ScratchFile() { ::unlink(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const std::string& path() const { return path_; }

  // Replaces the file's contents with data[0, size) and returns its path.
  const std::string& write(const uint8_t* data, size_t size) {
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) {
      std::perror("dsaf fuzz: open scratch file");
      std::abort();
    }
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::write(fd, data + done, size - done);
      if (n <= 0) {
        std::perror("dsaf fuzz: write scratch file");
        std::abort();
      }
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    return path_;
  }

 private:
  std::string path_;
};

// Aborts with a message: a property of accepted input failed (libFuzzer reports it as a
// crash and saves the input).
[[noreturn]] inline void property_failed(const char* what) {
  std::fprintf(stderr, "dsaf fuzz: property failed: %s\n", what);
  std::abort();
}

}  // namespace dsaf::fuzz

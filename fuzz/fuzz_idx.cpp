// libFuzzer harness: IDX files (image datasets), raw and gzip-compressed. The reader takes a
// path, so each input is written to a file of this process first.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "weft/data/idx.h"
#include "weft/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/tmp/weft-fuzz-idx-" + std::to_string(::getpid());
  for (const std::string& file : {path, path + ".gz"}) {
    {
      std::ofstream out(file, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    }
    try {
      weft::read_idx(file);
    } catch (const weft::Error&) {
    }
  }
  return 0;
}

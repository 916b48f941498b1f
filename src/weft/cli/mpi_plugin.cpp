// The weft command's MPI backend, loaded on first use: libweft_mpi.so (CMakeLists.txt) beside
// the executable in a build tree, or in <prefix>/<libdir>/weft once installed. Linked in,
// libmpi and the six libraries it brings (Open MPI's runtime, hwloc, libevent, udev) cost
// every weft process about 3 ms of processor time at start (bench/README.md, session 57),
// whether it used MPI or not.
#include <dlfcn.h>

#include <string>

#include "weft/cli/commands.h"
#include "weft/comm/mpi_transport.h"
#include "weft/comm/process.h"
#include "weft/util/error.h"

namespace weft::cli {

namespace {

comm::mpi::Backend load_mpi_backend() {
  std::string tried, why;
  for (const std::string& path : comm::own_file_candidates("libweft_mpi.so")) {
    void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = ::dlerror();
      tried += (tried.empty() ? "" : ", ") + path;
      if (e && std::string(e).find("No such file") == std::string::npos) why = e;  // there, but it would not load
      continue;
    }
    using Entry = void (*)(comm::mpi::Backend*);
    auto entry = reinterpret_cast<Entry>(::dlsym(lib, "weft_mpi_backend_entry_points"));
    if (!entry) throw ConfigError("--transport mpi: " + path + " has no weft_mpi_backend_entry_points");
    comm::mpi::Backend b{};
    entry(&b);
    return b;
  }
  throw ConfigError("--transport mpi: this weft's MPI backend cannot be loaded (" +
                    (why.empty() ? "not found at " + tried : why) + ")");
}

}  // namespace

void use_mpi_plugin() { comm::mpi::register_backend_loader(&load_mpi_backend); }

}  // namespace weft::cli

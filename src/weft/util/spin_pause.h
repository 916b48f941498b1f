// One pause of a thread that spins on a value another thread will change: x86's PAUSE (it
// tells the core a spin loop runs, which frees resources for the other hardware thread and
// avoids the memory-order flush when the loop ends); nothing elsewhere. The thread pool's
// waits, the communicator's progress loop and SharedChunks' wait use it.
#pragma once

namespace weft {

inline void spin_pause() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

}  // namespace weft

#!/usr/bin/env bash
# Installs the Debian packages weft needs to build, test and benchmark.
# Idempotent: installs only what is missing. Works as root or through sudo.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libopenblas-dev          # GEMM (cblas_sgemm / cblas_dgemm)
  libdnnl-dev              # oneDNN: matrix products (fp32, bf16) and convolutions where faster
  libxsmm-dev              # libxsmm: JIT kernels for the products of layers and attention heads
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev zlib1g-dev libyaml-cpp-dev
  libssl-dev               # HMAC-SHA256 for the job token handshake
  openmpi-bin libopenmpi-dev  # the MPI transport, mpirun launches, the MPI benchmark
  dataset-fashion-mnist    # real image data for training
  fortunes                 # real English text for language models
  tshark                   # decodes the simulator's pcap captures in a test
  libcpp-httplib-dev       # the HTTP client of weft serve-bench and of the replicas' front end
  libboost-dev             # Boost.Asio and Boost.Beast: the event loop and request parser of weft serve
  libsentencepiece-dev     # BPE tokenizers for language models (--tokenizer bpe)
  libpcre2-dev             # GPT-2's byte-level BPE splits text with a Unicode regular expression
  curl                     # tests and docs talk to weft serve as users do
  python3                  # test scripts read traces and JSON with it
  libjs-chart.js           # Chart.js, built into the pages of weft report
  chromium                 # tests open the report pages in a real (headless) browser
  python3-torch python3-numpy  # PyTorch scripts under weft launch (tests), the benchmarks' reference
  python3-regex            # the GPT-2 reference tokenizer a test checks weft's against
  python3-jinja2           # the chat templates weft renders, rendered by Jinja itself in a test
  libtorch-dev pybind11-dev    # the torch.distributed backend "weft" (bindings/torch)
)
# make fuzz builds the libFuzzer harnesses with clang; libFuzzer and the sanitizer runtimes
# are in libclang-rt-dev, which clang only recommends (and recommendations are not installed).
if [ "${WEFT_FUZZ_DEPS:-0}" = "1" ]; then
  packages+=(clang libclang-rt-dev)
fi

# Node.js runs the official OpenAI SDK against weft serve in a test (Debian's, where the
# machine has none).
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# The official OpenAI SDK for Node (npm registry), pinned, into build-deps/npm (git-ignored):
# tests talk to weft serve with it as users' programs do.
install_openai_sdk() {
  local dir version=4.104.0
  dir="$(cd "$(dirname "$0")/.." && pwd)/build-deps/npm"
  if [ -f "$dir/node_modules/openai/package.json" ] && grep -q "\"version\": \"$version\"" "$dir/node_modules/openai/package.json"; then
    return 0
  fi
  echo "install-deps: installing the openai npm package $version into $dir"
  mkdir -p "$dir"
  npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "openai@$version" >/dev/null
}

if [ ${#missing[@]} -eq 0 ]; then
  install_openai_sdk
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo_cmd=(sudo); else
    echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
install_openai_sdk

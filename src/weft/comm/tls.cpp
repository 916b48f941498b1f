#include "weft/comm/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>

#include <chrono>
#include <cstring>

#include "weft/comm/auth.h"
#include "weft/util/error.h"

namespace weft::comm {

namespace {
constexpr const char* kCiphers = "DHE-PSK-AES128-GCM-SHA256";
constexpr const char* kIdentity = "weft";

std::string ssl_error_text() {
  const unsigned long e = ERR_get_error();
  if (e == 0) return "no detail";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return buf;
}

// Why an SSL call failed with SSL_get_error's `e` (the system's error, or OpenSSL's).
std::string failure_text(int e) { return e == SSL_ERROR_SYSCALL ? std::string(std::strerror(errno)) : ssl_error_text(); }

// The key each connection's SSL object carries (app data) for the PSK callbacks.
using Key = Digest;

unsigned int client_psk(SSL* ssl, const char*, char* identity, unsigned int max_identity, unsigned char* psk,
                        unsigned int max_psk) {
  const auto* key = static_cast<const Key*>(SSL_get_app_data(ssl));
  if (!key || max_psk < key->size() || max_identity <= std::strlen(kIdentity)) return 0;
  std::strcpy(identity, kIdentity);
  std::memcpy(psk, key->data(), key->size());
  return static_cast<unsigned int>(key->size());
}

unsigned int server_psk(SSL* ssl, const char* identity, unsigned char* psk, unsigned int max_psk) {
  const auto* key = static_cast<const Key*>(SSL_get_app_data(ssl));
  if (!key || !identity || std::strcmp(identity, kIdentity) != 0 || max_psk < key->size()) return 0;
  std::memcpy(psk, key->data(), key->size());
  return static_cast<unsigned int>(key->size());
}

SSL_CTX* make_context(bool server) {
  SSL_CTX* ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (!ctx) throw CommError("TLS: cannot create a context (" + ssl_error_text() + ")");
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
  if (SSL_CTX_set_cipher_list(ctx, kCiphers) != 1) {
    SSL_CTX_free(ctx);
    throw CommError(std::string("TLS: this OpenSSL lacks ") + kCiphers);
  }
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_read_ahead(ctx, 1);  // whole socket buffers per read, not a header and a record
  if (server) {
    SSL_CTX_set_dh_auto(ctx, 1);  // ephemeral Diffie-Hellman: forward secrecy
    SSL_CTX_set_psk_server_callback(ctx, server_psk);
  }
  else SSL_CTX_set_psk_client_callback(ctx, client_psk);
  return ctx;
}
}  // namespace

struct TlsChannel::Impl {
  SSL* ssl = nullptr;  // holds a reference to its context
  Key key;
  ~Impl() {
    if (ssl) SSL_free(ssl);
  }
};

TlsChannel::TlsChannel(Socket s, std::unique_ptr<Impl> impl)
    : socket_(std::move(s)), impl_(std::move(impl)), staging_(new std::uint8_t[64 * 1024]) {}

TlsChannel::~TlsChannel() = default;

std::size_t TlsChannel::write_some(const void* data, std::size_t n) {
  if (n == 0) return 0;
  std::size_t written = 0;
  const int r = SSL_write_ex(impl_->ssl, data, n, &written);
  if (r == 1) return written;
  const int e = SSL_get_error(impl_->ssl, r);
  if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) return 0;
  throw CommError("TLS connection lost (" + failure_text(e) + ")");
}

// Reads what the socket has, record by record. Decrypted bytes it holds back (SSL_pending)
// are returned by the next call, which the executor makes before it sleeps on the socket.
std::size_t TlsChannel::read_some(void* data, std::size_t n) {
  if (n == 0) return 0;
  std::size_t got = 0;
  const int r = SSL_read_ex(impl_->ssl, data, n, &got);
  if (r == 1) return got;
  const int e = SSL_get_error(impl_->ssl, r);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return 0;
  if (e == SSL_ERROR_ZERO_RETURN) throw CommError("the peer closed the connection");
  if (e == SSL_ERROR_SYSCALL && errno == 0) throw CommError("the peer closed the connection");
  throw CommError("TLS connection lost (" + failure_text(e) + "): a record failed its integrity check or the peer went away");
}

std::size_t TlsChannel::consume_some(std::size_t n, const Consumer& consume) {
  std::size_t got = read_some(staging_.get(), std::min<std::size_t>(n, 64 * 1024));
  if (got > 0) consume(staging_.get(), got);
  return got;
}

std::vector<std::unique_ptr<Channel>> tls_handshakes(std::vector<Socket> sockets, const std::vector<bool>& server,
                                                     const std::string& token, double timeout_s) {
  const Key key = hmac_sha256(token, "weft tls psk");
  // One context per role, shared by the connections (each SSL holds a reference).
  std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> serving(make_context(true), SSL_CTX_free),
      connecting(make_context(false), SSL_CTX_free);
  std::vector<std::unique_ptr<TlsChannel::Impl>> impls;
  for (std::size_t i = 0; i < sockets.size(); ++i) {
    auto impl = std::make_unique<TlsChannel::Impl>();
    impl->key = key;
    impl->ssl = SSL_new(server[i] ? serving.get() : connecting.get());
    if (!impl->ssl || SSL_set_fd(impl->ssl, sockets[i].fd()) != 1)
      throw CommError("TLS: cannot set up a connection (" + ssl_error_text() + ")");
    SSL_set_app_data(impl->ssl, &impl->key);
    if (server[i]) SSL_set_accept_state(impl->ssl);
    else SSL_set_connect_state(impl->ssl);
    set_nonblocking(sockets[i].fd(), true);
    impls.push_back(std::move(impl));
  }
  // Every handshake advances whenever its socket is ready, so none waits on another's order.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::vector<bool> done(sockets.size(), false);
  std::size_t left = sockets.size();
  while (left > 0) {
    std::vector<pollfd> fds;
    for (std::size_t i = 0; i < sockets.size(); ++i) {
      if (done[i]) continue;
      const int r = SSL_do_handshake(impls[i]->ssl);
      if (r == 1) {
        done[i] = true;
        --left;
        continue;
      }
      const int e = SSL_get_error(impls[i]->ssl, r);
      if (e == SSL_ERROR_WANT_READ) fds.push_back({sockets[i].fd(), POLLIN, 0});
      else if (e == SSL_ERROR_WANT_WRITE) fds.push_back({sockets[i].fd(), POLLOUT, 0});
      else
        throw CommError("TLS handshake failed (" + ssl_error_text() +
                        "): the peer's job token differs, or it is not a weft rank with WEFT_TLS=1");
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) throw CommError("TLS handshake timed out");
    ::poll(fds.data(), fds.size(), 100);
  }
  std::vector<std::unique_ptr<Channel>> channels;
  for (std::size_t i = 0; i < sockets.size(); ++i) {
    set_nodelay(sockets[i].fd());
    set_buffer_sizes(sockets[i].fd(), 4 << 20);
    channels.push_back(std::unique_ptr<Channel>(new TlsChannel(std::move(sockets[i]), std::move(impls[i]))));
  }
  return channels;
}

}  // namespace weft::comm

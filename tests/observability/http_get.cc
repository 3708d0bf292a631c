#include "tests/observability/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace convserve {
namespace {

// Closes the socket on every path.
class Socket {
 public:
  Socket() : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {}
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }

 private:
  const int fd_;
};

sockaddr_in Loopback(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

absl::Status Errno(const std::string& what) {
  const std::string text = absl::StrCat(what, ": ", std::strerror(errno));
  return errno == ECONNREFUSED ? absl::UnavailableError(text) : absl::InternalError(text);
}

}  // namespace

absl::StatusOr<HttpResponse> HttpGet(int port, const std::string& target,
                                     absl::Duration timeout) {
  Socket sock;
  if (sock.fd() < 0) return Errno("socket");
  const timeval tv = absl::ToTimeval(timeout);
  setsockopt(sock.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(sock.fd(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const sockaddr_in address = Loopback(port);
  if (connect(sock.fd(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return Errno(absl::StrCat("connect 127.0.0.1:", port));
  }
  const std::string request =
      absl::StrCat("GET ", target, " HTTP/1.0\r\nHost: 127.0.0.1:", port, "\r\n\r\n");
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n = send(sock.fd(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return Errno(absl::StrCat("send to 127.0.0.1:", port));
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  char buffer[16384];
  while (true) {
    const ssize_t n = recv(sock.fd(), buffer, sizeof(buffer), 0);
    if (n == 0) break;
    if (n < 0) return Errno(absl::StrCat("receive from 127.0.0.1:", port, target));
    raw.append(buffer, static_cast<size_t>(n));
  }
  const size_t end_of_headers = raw.find("\r\n\r\n");
  int status = 0;
  if (raw.compare(0, 5, "HTTP/") != 0 || end_of_headers == std::string::npos ||
      raw.size() < 12 || !absl::SimpleAtoi(raw.substr(9, 3), &status)) {
    return absl::InternalError(absl::StrCat("malformed HTTP response from 127.0.0.1:", port,
                                            target, ": ", raw.substr(0, 200)));
  }
  HttpResponse response;
  response.status = status;
  response.headers = raw.substr(0, end_of_headers);
  response.body = raw.substr(end_of_headers + 4);
  return response;
}

std::string UrlEncode(absl::string_view value) {
  std::string out;
  for (const char c : value) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
        c == '~') {
      out.push_back(c);
    } else {
      absl::StrAppendFormat(&out, "%%%02X", static_cast<unsigned char>(c));
    }
  }
  return out;
}

absl::StatusOr<int> PickFreePort() {
  Socket sock;
  if (sock.fd() < 0) return Errno("socket");
  sockaddr_in address = Loopback(0);
  if (bind(sock.fd(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return Errno("bind 127.0.0.1:0");
  }
  socklen_t length = sizeof(address);
  if (getsockname(sock.fd(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return Errno("getsockname");
  }
  return ntohs(address.sin_port);
}

}  // namespace convserve

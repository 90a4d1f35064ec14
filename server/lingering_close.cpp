#include "server/lingering_close.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace strata::server {

namespace {

constexpr auto kTotal = std::chrono::seconds(10);
constexpr auto kIdle = std::chrono::seconds(2);
constexpr uint64_t kMaxBytes = 256ull << 20;
constexpr size_t kMaxDraining = 1024;  // past this, a connection is closed at once

void wake(int fd) {
  const char b = 1;
  [[maybe_unused]] const ssize_t n = ::write(fd, &b, 1);  // a full pipe is already a wake-up
}

}  // namespace

LingeringCloser::LingeringCloser() {
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;
  thread_ = std::thread([this] { run(); });
}

LingeringCloser::~LingeringCloser() {
  stop_ = true;
  if (wake_[1] >= 0) wake(wake_[1]);
  thread_.join();
  for (const Draining& d : draining_) ::close(d.fd);
  for (int fd : wake_)
    if (fd >= 0) ::close(fd);
}

void LingeringCloser::hand_over(int fd) {
  if (fd < 0) return;
  const int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  ::shutdown(fd, SHUT_WR);  // FIN after the response (the socket is shared with `own`)
  // The caller's descriptor now reads end of file: whatever still reads it ends, and closes it.
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) == 0) {
    ::close(pair[1]);
    ::dup2(pair[0], fd);
    ::close(pair[0]);
  } else {
    ::shutdown(fd, SHUT_RD);
  }
  if (own < 0) return;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (draining_.size() >= kMaxDraining || wake_[1] < 0) {
      ::close(own);
      return;
    }
    draining_.push_back(Draining{own, now, now, 0});
  }
  wake(wake_[1]);
}

int LingeringCloser::draining() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(draining_.size());
}

void LingeringCloser::run() {
  std::vector<pollfd> fds;
  char buf[65536];
  while (!stop_.load()) {
    fds.clear();
    fds.push_back(pollfd{wake_[0], POLLIN, 0});
    {
      std::lock_guard<std::mutex> l(mu_);
      for (const Draining& d : draining_) fds.push_back(pollfd{d.fd, POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), 200);
    if (fds[0].revents & POLLIN)
      while (::read(wake_[0], buf, sizeof buf) > 0) {
      }
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> l(mu_);
    // Entries added since the poll are not in `fds`: they wait for the next round.
    for (size_t i = 1; i < fds.size(); ++i) {
      auto it = std::find_if(draining_.begin(), draining_.end(), [&](const Draining& d) { return d.fd == fds[i].fd; });
      if (it == draining_.end() || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::recv(it->fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        it->dropped += static_cast<uint64_t>(n);
        it->last = now;
      } else if (!(n < 0 && (errno == EAGAIN || errno == EINTR))) {
        it->dropped = kMaxBytes;  // closed, reset or error: done
      }
    }
    auto done = [&](const Draining& d) {
      const bool over = d.dropped >= kMaxBytes || now - d.start >= kTotal || now - d.last >= kIdle;
      if (over) ::close(d.fd);
      return over;
    };
    draining_.erase(std::remove_if(draining_.begin(), draining_.end(), done), draining_.end());
  }
}

}  // namespace strata::server

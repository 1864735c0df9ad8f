#include "comm/launch.hpp"

#include "base/error.hpp"

#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <optional>
#include <random>
#include <set>

extern char** environ;

namespace acc::comm {
namespace {

using Clock = std::chrono::steady_clock;

// Marks the ranks --nproc started, so that they do not launch again.
constexpr const char* kLauncherVariable = "ACC_NPROC_LAUNCHER";

// Written to by the signal handler, read by the forwarding loop.
int g_signal_pipe[2] = {-1, -1};
volatile std::sig_atomic_t g_forward_signal = 0;

void on_signal(int signal) {
    if (signal != SIGCHLD) g_forward_signal = signal;
    const char byte = 1;
    [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &byte, 1);
}

// Installs the handlers for the launcher's lifetime and restores the old ones after.
class SignalGuard {
public:
    SignalGuard() {
        if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
            throw Error(std::string("--nproc: cannot create a pipe: ") + std::strerror(errno));
        struct sigaction action {};
        action.sa_handler = on_signal;
        sigemptyset(&action.sa_mask);
        action.sa_flags = SA_RESTART;
        for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &action, &old_[i]);
    }
    ~SignalGuard() {
        for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
        ::close(g_signal_pipe[0]);
        ::close(g_signal_pipe[1]);
        g_signal_pipe[0] = g_signal_pipe[1] = -1;
        g_forward_signal = 0;
    }
    int fd() const { return g_signal_pipe[0]; }

private:
    static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGCHLD};
    struct sigaction old_[3];
};

struct Stream {
    int fd = -1;
    std::string pending;  // an incomplete last line
};

struct Child {
    int rank = 0;
    pid_t pid = -1;
    bool running = true;
    int status = 0;  // exit code, or 128 + signal
    bool ended = false;  // ended by the launcher because another rank failed
    Stream out, err;
    std::string errors;     // the rank's "<tool>[r]: error: " lines, held until it exits
    bool reported = false;  // `errors` passed on (or dropped)
};

bool is_rendezvous_variable(const std::string& name) {
    static const std::set<std::string> names = {"RANK",        "WORLD_SIZE", "LOCAL_RANK",       "LOCAL_WORLD_SIZE",
                                                "GROUP_RANK",  "ROLE_RANK",  "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE",
                                                "MASTER_ADDR", "MASTER_PORT"};
    return names.count(name) > 0 || name.rfind("TORCHELASTIC_", 0) == 0;
}

void write_all(int fd, const std::string& text) {
    size_t done = 0;
    while (done < text.size()) {
        ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;  // our own output is gone; keep draining the ranks
        done += static_cast<size_t>(n);
    }
}

// Our stderr shows a rank's live progress line (cli::Progress) when it is a terminal.
bool live_terminal() {
    const char* term = std::getenv("TERM");
    return ::isatty(STDERR_FILENO) && !(term && std::strcmp(term, "dumb") == 0);
}

constexpr char kClearLine[] = "\r\033[K";

class Forwarder {
public:
    Forwarder(std::string tool, bool live) : tool_(std::move(tool)), live_(live) {}

    // Once a rank has exited and its output is drained: passes its error lines on,
    // except one that another rank already reported in the same words (a bad
    // option, a missing data directory: every rank finds it), which the user
    // should read once.
    void report(Child& child) {
        if (child.reported || child.running || child.err.fd >= 0) return;
        child.reported = true;
        std::string kept;
        size_t start = 0;
        while (start < child.errors.size()) {
            const size_t end = child.errors.find('\n', start) + 1;
            const std::string line = child.errors.substr(start, end - start);
            start = end;
            const std::string message = line.substr(line.find("]: error: ") + 1);
            if (!reported_.insert(message).second) continue;
            kept += line;
        }
        if (!kept.empty()) {
            if (shown_) write_all(STDERR_FILENO, kClearLine);
            shown_ = false;
            write_all(STDERR_FILENO, kept);
        }
        child.errors.clear();
    }

    // Passes complete lines on; `eof` flushes an unterminated last line. On a
    // terminal, a live progress line ("\r\033[K..." without a newline) passes
    // at once, and is cleared before anything else is written.
    void forward(Child& child, Stream& stream, bool is_stdout, bool eof) {
        size_t start = 0;
        std::string block;
        auto pass = [&](const std::string& whole) {
            auto [live, line] = split_live_lines(whole);
            block += live;
            if (!is_stdout && is_error(child.rank, line))
                child.errors += line;
            else
                block += decorate(child.rank, is_stdout, line);
        };
        for (;;) {
            size_t end = stream.pending.find('\n', start);
            if (end == std::string::npos) break;
            pass(stream.pending.substr(start, end - start + 1));
            start = end + 1;
        }
        stream.pending.erase(0, start);
        if (eof && !stream.pending.empty()) {
            pass(stream.pending + "\n");
            stream.pending.clear();
        }
        if (!block.empty()) {
            if (shown_) write_all(STDERR_FILENO, kClearLine);
            shown_ = false;
            write_all(is_stdout ? STDOUT_FILENO : STDERR_FILENO, block);
        }
        if (live_ && !is_stdout && stream.pending.rfind(kClearLine, 0) == 0) {
            write_all(STDERR_FILENO, stream.pending);
            shown_ = stream.pending.size() > sizeof kClearLine - 1;
            stream.pending.clear();
        }
    }

private:
    // The rank's own error message, as acc::cli::run_tool prints it.
    bool is_error(int rank, const std::string& line) const {
        return line.rfind(tool_ + "[" + std::to_string(rank) + "]: error: ", 0) == 0;
    }
    std::string decorate(int rank, bool is_stdout, std::string line) const {
        // A line after a live one starts by clearing it: keep that in front of the tag.
        std::string clear;
        while (line.rfind(kClearLine, 0) == 0) {
            clear += kClearLine;
            line.erase(0, sizeof kClearLine - 1);
        }
        if (!clear.empty()) return clear + decorate(rank, is_stdout, line);
        if (is_stdout && rank == 0) return line;  // results stay machine-readable
        const std::string tag = tool_ + "[" + std::to_string(rank) + "]";
        if (line.rfind(tag, 0) == 0) return line;
        return "[" + std::to_string(rank) + "] " + line;
    }
    std::string tool_;
    std::set<std::string> reported_;
    bool live_ = false;
    bool shown_ = false;  // a live line is on the terminal
};

void drain(Child& child, Stream& stream, bool is_stdout, Forwarder& forwarder) {
    char buffer[65536];
    for (;;) {
        ssize_t n = ::read(stream.fd, buffer, sizeof buffer);
        if (n > 0) {
            stream.pending.append(buffer, static_cast<size_t>(n));
            forwarder.forward(child, stream, is_stdout, false);
            if (static_cast<size_t>(n) < sizeof buffer) return;
            continue;
        }
        if (n < 0 && (errno == EINTR)) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        forwarder.forward(child, stream, is_stdout, true);
        ::close(stream.fd);
        stream.fd = -1;
        return;
    }
}

std::string describe_status(int status) {
    if (status > 128) {
        const char* name = ::strsignal(status - 128);
        return "was killed by signal " + std::to_string(status - 128) + (name ? std::string(" (") + name + ")" : "");
    }
    return "exited with " + std::to_string(status);
}

// 128 random bits in hex: a run token no other process can guess.
std::string random_token() {
    std::random_device device;
    std::string token;
    for (int i = 0; i < 4; ++i) {
        char part[9];
        std::snprintf(part, sizeof part, "%08x", static_cast<unsigned>(device()));
        token += part;
    }
    return token;
}

pid_t spawn(const std::vector<std::string>& args, const std::vector<std::string>& env, Child& child) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
        throw Error(std::string("--nproc: cannot create a pipe: ") + std::strerror(errno));
    std::vector<char*> argv, envp;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0)
        throw Error(std::string("--nproc: cannot start rank ") + std::to_string(child.rank) + ": " +
                    std::strerror(errno));
    if (pid == 0) {
        // A rank must not outlive its launcher.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(1);
        ::dup2(out[1], STDOUT_FILENO);
        ::dup2(err[1], STDERR_FILENO);
        ::execve("/proc/self/exe", argv.data(), envp.data());
        const std::string message =
            argv[0] + std::string(": error: --nproc: cannot start a rank: ") + std::strerror(errno) + "\n";
        [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, message.data(), message.size());
        ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    child.out.fd = out[0];
    child.err.fd = err[0];
    ::fcntl(out[0], F_SETFL, O_NONBLOCK);
    ::fcntl(err[0], F_SETFL, O_NONBLOCK);
    return pid;
}

}  // namespace

std::pair<std::string, std::string> split_live_lines(const std::string& line) {
    const size_t last = line.rfind(kClearLine);
    if (last == std::string::npos || last == 0 || line.rfind(kClearLine, 0) != 0) return {"", line};
    // Clears alone in front (a live line cleared, then this one) are the line's own.
    for (size_t at = 0; at < last; at += sizeof kClearLine - 1)
        if (line.compare(at, sizeof kClearLine - 1, kClearLine) != 0) return {line.substr(0, last), line.substr(last)};
    return {"", line};
}

PortReservation::PortReservation() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw Error(std::string("cannot open a socket to find a free port: ") + std::strerror(errno));
    const int on = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    socklen_t length = sizeof address;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0)
        port_ = ntohs(address.sin_port);
    if (port_ <= 0) {
        ::close(fd_);
        throw Error("cannot find a free TCP port on 127.0.0.1; give one with --master-port");
    }
}

PortReservation::~PortReservation() { ::close(fd_); }

namespace {

// The environment every started rank shares: this process's, without any rendezvous
// of its own, with the launcher's pid, a run token and one OpenMP thread unless set.
std::vector<std::string> ranks_environment(bool live) {
    std::vector<std::string> base_env;
    bool has_omp = false;
    for (char** e = environ; *e; ++e) {
        std::string entry = *e;
        std::string name = entry.substr(0, entry.find('='));
        if (is_rendezvous_variable(name) || name == kLauncherVariable || name == "ACC_PROGRESS_TERMINAL") continue;
        if (name == kRunTokenVariable && entry.size() == name.size() + 1) continue;  // set but empty
        has_omp = has_omp || name == "OMP_NUM_THREADS";
        base_env.push_back(entry);
    }
    // As torchrun does: one OpenMP thread per rank unless the user chose otherwise.
    if (!has_omp) base_env.push_back("OMP_NUM_THREADS=1");
    base_env.push_back(std::string(kLauncherVariable) + "=" + std::to_string(::getpid()));
    // The ranks' store is theirs alone: a process that does not know the token cannot join it.
    const char* token = std::getenv(kRunTokenVariable);
    if (!token || !*token) base_env.push_back(std::string(kRunTokenVariable) + "=" + random_token());
    if (live) base_env.push_back("ACC_PROGRESS_TERMINAL=1");  // the ranks' stderr is a pipe to a terminal
    return base_env;
}

// Starts ranks 0 .. nproc-1 of a rendezvous at addr:port; if one cannot start, kills those that did.
std::vector<Child> start_ranks(const RendezvousConfig& config, const std::vector<std::string>& args,
                               const std::vector<std::string>& base_env, const std::string& addr, int port) {
    std::vector<Child> children(static_cast<size_t>(config.nproc));
    for (int r = 0; r < config.nproc; ++r) {
        Child& child = children[static_cast<size_t>(r)];
        child.rank = r;
        std::vector<std::string> env = base_env;
        env.push_back("RANK=" + std::to_string(r));
        env.push_back("LOCAL_RANK=" + std::to_string(r));
        env.push_back("WORLD_SIZE=" + std::to_string(config.nproc));
        env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(config.nproc));
        env.push_back("MASTER_ADDR=" + addr);
        env.push_back("MASTER_PORT=" + std::to_string(port));
        try {
            child.pid = spawn(args, env, child);
        } catch (const Error&) {
            for (Child& started : children)
                if (started.pid > 0) ::kill(started.pid, SIGKILL);
            throw;
        }
        spdlog::debug("rank {} is pid {}", r, child.pid);
    }
    return children;
}

// Until every rank has ended and its output is forwarded: forwards signals to the
// ranks, ends the others `grace_seconds` after one fails, and kills what is left 3 s
// after that. Returns the worst exit status of the ranks that ended by themselves:
// the 143 of a rank ended because another failed says nothing about the failure.
int supervise(std::vector<Child>& children, SignalGuard& signals, Forwarder& forwarder, double grace_seconds) {
    std::optional<Clock::time_point> failed_at, terminated_at;
    bool killed = false;
    for (;;) {
        std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
        std::vector<std::pair<Child*, bool>> owners{{nullptr, false}};
        for (Child& c : children) {
            if (c.out.fd >= 0) {
                fds.push_back({c.out.fd, POLLIN, 0});
                owners.push_back({&c, true});
            }
            if (c.err.fd >= 0) {
                fds.push_back({c.err.fd, POLLIN, 0});
                owners.push_back({&c, false});
            }
        }
        const bool any_running =
            std::any_of(children.begin(), children.end(), [](const Child& c) { return c.running; });
        if (!any_running && fds.size() == 1) break;
        ::poll(fds.data(), fds.size(), 100);
        if (fds[0].revents & POLLIN) {
            char sink[64];
            while (::read(fds[0].fd, sink, sizeof sink) > 0) {
            }
        }
        for (size_t i = 1; i < fds.size(); ++i) {
            if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            Child& c = *owners[i].first;
            drain(c, owners[i].second ? c.out : c.err, owners[i].second, forwarder);
        }
        for (Child& c : children) {
            if (!c.running) continue;
            int status = 0;
            if (::waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
            c.running = false;
            c.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            if (c.status != 0 && !failed_at) failed_at = Clock::now();
            if (WIFSIGNALED(status) && !terminated_at) spdlog::warn("rank {} {}", c.rank, describe_status(c.status));
        }
        for (Child& c : children) forwarder.report(c);
        const auto now = Clock::now();
        if (const int signal = g_forward_signal) {
            g_forward_signal = 0;
            for (Child& c : children)
                if (c.running) ::kill(c.pid, signal);
            if (!terminated_at) terminated_at = now;
        }
        if (failed_at && !terminated_at && now - *failed_at > std::chrono::duration<double>(grace_seconds)) {
            for (Child& c : children) {
                if (!c.running) continue;
                spdlog::warn("rank {} is still running {:.0f} s after another rank failed; ending it", c.rank,
                             grace_seconds);
                ::kill(c.pid, SIGTERM);
                c.ended = true;
            }
            terminated_at = now;
        }
        if (terminated_at && !killed && now - *terminated_at > std::chrono::seconds(3)) {
            for (Child& c : children)
                if (c.running) ::kill(c.pid, SIGKILL);
            killed = true;
        }
    }
    for (Child& c : children) forwarder.report(c);
    int worst = 0;
    for (const Child& c : children)
        if (!c.ended) worst = std::max(worst, c.status);
    return worst;
}

}  // namespace

int run_ranks(const RendezvousConfig& config, int argc, char** argv, const std::string& tool,
              const std::function<int()>& run, double grace_seconds) {
    if (config.nproc <= 0) return run();
    // A rank this launcher started: the environment holds its rendezvous.
    if (const char* launcher = std::getenv(kLauncherVariable); launcher && std::to_string(::getppid()) == launcher)
        return run();
    if (config.rank >= 0 || config.world_size >= 1)
        throw UsageError("--nproc starts its own ranks; leave out --rank and --world-size");

    const std::string addr = config.master_addr.empty() ? "127.0.0.1" : config.master_addr;
    std::optional<PortReservation> reserved;  // held until the ranks have ended
    if (config.master_port < 1) reserved.emplace();
    const int port = reserved ? reserved->port() : config.master_port;
    const std::vector<std::string> args(argv, argv + argc);
    const bool live = live_terminal();
    const std::vector<std::string> base_env = ranks_environment(live);
    spdlog::debug("starting {} ranks, rendezvous at {}:{}", config.nproc, addr, port);

    SignalGuard signals;
    std::vector<Child> children = start_ranks(config, args, base_env, addr, port);
    Forwarder forwarder(tool, live);
    return supervise(children, signals, forwarder, grace_seconds);
}

}  // namespace acc::comm

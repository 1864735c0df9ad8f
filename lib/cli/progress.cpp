#include "cli/progress.hpp"

#include "base/text.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <unistd.h>

namespace acc::cli {
namespace {

double steady_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr double kRedrawSeconds = 0.2;

}  // namespace

bool Progress::stderr_is_terminal() {
    const char* term = std::getenv("TERM");
    if (term && std::strcmp(term, "dumb") == 0) return false;
    const char* launcher = std::getenv("ACC_PROGRESS_TERMINAL");
    return ::isatty(STDERR_FILENO) || (launcher && std::strcmp(launcher, "1") == 0);
}

Progress::Progress(Options options) : options_(std::move(options)), style_(options_.style) {
    if (!options_.clock) options_.clock = steady_seconds;
    if (!options_.log) options_.log = [](const std::string& line) { spdlog::info("{}", line); };
    if (!options_.terminal) options_.terminal = &std::cerr;
    if (style_ == Style::automatic) {
        if (!spdlog::default_logger()->should_log(spdlog::level::info))
            style_ = Style::quiet;
        else
            style_ = stderr_is_terminal() ? Style::live : Style::lines;
    }
}

Progress::~Progress() { clear_line(); }

void Progress::begin_run(std::int64_t steps) {
    run_steps_ = steps;
    run_done_ = 0;
    run_seconds_ = 0;
}

void Progress::begin_epoch(std::int64_t epoch, std::int64_t epochs, std::int64_t steps) {
    epoch_ = epoch;
    epochs_ = epochs;
    steps_ = steps;
    done_ = 0;
    samples_ = 0;
    loss_sum_ = 0;
    epoch_start_ = last_line_ = options_.clock();
}

void Progress::step(std::int64_t samples, double loss) {
    ++done_;
    ++run_done_;
    samples_ += samples;
    loss_sum_ += loss * static_cast<double>(samples);
    if (style_ == Style::quiet) return;
    const double now = options_.clock();
    if (style_ == Style::live) {
        if (now - last_draw_ < kRedrawSeconds && done_ < steps_) return;
        last_draw_ = now;
        show();
    } else if (now - last_line_ >= options_.interval) {
        last_line_ = now;
        options_.log(status());
    }
}

void Progress::show() {
    // One write, so that a launcher reading the rank's pipe gets the whole line at once.
    *options_.terminal << ("\r\033[K" + status()) << std::flush;
    line_shown_ = true;
}

void Progress::begin_items(std::int64_t items, double work) {
    items_mode_ = true;
    items_ = items;
    item_ = 0;
    work_total_ = work;
    work_done_ = item_work_ = 0;
    items_start_ = last_line_ = options_.clock();
}

void Progress::start_item(const std::string& label, double work) {
    ++item_;
    item_label_ = label;
    item_work_ = work;
    if (style_ == Style::quiet) return;
    const double now = options_.clock();
    if (style_ == Style::live) {
        // Items take long enough that each is worth a redraw.
        last_draw_ = now;
        show();
    } else if (now - last_line_ >= options_.interval) {
        last_line_ = now;
        options_.log(status());
    }
}

void Progress::finish_item() {
    work_done_ += item_work_;
    item_work_ = 0;
    clear_line();
}

void Progress::end_epoch() {
    run_seconds_ += options_.clock() - epoch_start_;
    clear_line();
}

std::string Progress::status() const {
    if (items_mode_) {
        // Time left: the sweep's seconds per unit of work so far, times the work still to do.
        const double spent = options_.clock() - items_start_;
        const double left = work_done_ > 0 ? spent / work_done_ * std::max(0.0, work_total_ - work_done_) : NAN;
        return item_label_ + "  item " + std::to_string(item_) + "/" + std::to_string(items_) + "  " +
               duration(left) + " left";
    }
    const double elapsed = options_.clock() - epoch_start_;
    const double rate = elapsed > 0 ? static_cast<double>(samples_) / elapsed : 0;
    const double loss = samples_ > 0 ? loss_sum_ / static_cast<double>(samples_) : NAN;
    // Time left: the run's mean seconds per step so far, times the steps still to go.
    const double spent = run_seconds_ + elapsed;
    const double left = run_done_ > 0 && run_steps_ > 0
                            ? spent / static_cast<double>(run_done_) * static_cast<double>(run_steps_ - run_done_)
                            : NAN;
    char loss_text[32];
    std::snprintf(loss_text, sizeof loss_text, "%.4f", loss);
    return "epoch " + std::to_string(epoch_) + " (" + std::to_string(epoch_ + 1) + "/" + std::to_string(epochs_) +
           ")  step " + std::to_string(done_) + "/" + std::to_string(steps_) + "  loss " + loss_text + "  " +
           with_commas(static_cast<std::int64_t>(std::lround(rate))) + " " + options_.unit + "/s  " + duration(left) +
           " left";
}

std::string Progress::duration(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) return "-";
    const auto total = static_cast<std::int64_t>(std::lround(seconds));
    char buffer[48];
    if (total >= 3600)
        std::snprintf(buffer, sizeof buffer, "%lld:%02lld:%02lld", static_cast<long long>(total / 3600),
                      static_cast<long long>(total / 60 % 60), static_cast<long long>(total % 60));
    else
        std::snprintf(buffer, sizeof buffer, "%lld:%02lld", static_cast<long long>(total / 60),
                      static_cast<long long>(total % 60));
    return buffer;
}

void Progress::clear_line() {
    if (!line_shown_) return;
    *options_.terminal << "\r\033[K" << std::flush;
    line_shown_ = false;
}

}  // namespace acc::cli

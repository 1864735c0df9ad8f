// Progress of a long run on stderr: a live status line on a terminal, plain log
// lines at intervals when stderr is not a terminal, nothing with -q. Training
// counts epochs and steps; a benchmark's sweep counts items of work.
//
//   epoch 2 (3/10)  step 120/469  loss 0.4312  1,234 images/s  4:05 left
//   powersgd:2 W=16  item 12/40  0:35 left
//
// Ranks that --nproc starts write to a pipe read by their launcher; it sets
// ACC_PROGRESS_TERMINAL=1 when its own stderr is a terminal, and passes the
// live line through.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>

namespace acc::cli {

class Progress {
public:
    enum class Style {
        automatic,  ///< quiet if info logging is off (-q), live on a terminal, else lines
        live,       ///< one status line redrawn in place
        lines,      ///< a plain log line every `interval` seconds
        quiet,
    };
    struct Options {
        Style style = Style::automatic;
        double interval = 30;                         ///< seconds between plain lines
        std::string unit = "samples";                 ///< what a sample is: "images", "tokens"
        std::ostream* terminal = nullptr;             ///< where the live line goes; nullptr: std::cerr
        std::function<void(const std::string&)> log;  ///< plain lines; empty: spdlog info
        std::function<double()> clock;                ///< seconds; empty: a steady clock
    };

    explicit Progress(Options options);
    Progress() : Progress(Options{}) {}
    ~Progress();
    Progress(const Progress&) = delete;
    Progress& operator=(const Progress&) = delete;

    Style style() const { return style_; }
    /// Steps left in the whole run, for the time-left estimate.
    void begin_run(std::int64_t steps);
    /// `epoch` counts from 0; `epochs` is the run's total.
    void begin_epoch(std::int64_t epoch, std::int64_t epochs, std::int64_t steps);
    /// One step done: its samples and its mean loss.
    void step(std::int64_t samples, double loss);
    /// Clears the live line, so that the caller's summary line starts clean.
    void end_epoch();
    /// The current status, as the live line shows it.
    std::string status() const;

    /// A sweep of `items` pieces of work (a benchmark's measurements) that
    /// together take `work` units (any unit: 1 per item, bytes, ...).
    void begin_items(std::int64_t items, double work);
    /// The next item starts: `label` says what it is, `work` is its share.
    void start_item(const std::string& label, double work = 1);
    /// The item is done; clears the live line, so that the caller can print its result.
    void finish_item();

    /// Whether stderr is a terminal that shows a live line (or the launcher of
    /// this rank says its own is).
    static bool stderr_is_terminal();

    /// "4:05", "1:02:03"; "-" for a negative or non-finite time.
    static std::string duration(double seconds);

private:
    void clear_line();
    void show();

    Options options_;
    Style style_;
    std::int64_t run_steps_ = 0, run_done_ = 0;
    double run_seconds_ = 0;  // time inside epochs, evaluation excluded
    std::int64_t epoch_ = 0, epochs_ = 0, steps_ = 0, done_ = 0, samples_ = 0;
    double loss_sum_ = 0;
    double epoch_start_ = 0, last_draw_ = -1e300, last_line_ = 0;
    bool line_shown_ = false;
    // A sweep of items: the item in progress, work done and in all.
    bool items_mode_ = false;
    std::string item_label_;
    std::int64_t items_ = 0, item_ = 0;
    double work_total_ = 0, work_done_ = 0, item_work_ = 0, items_start_ = 0;
};

}  // namespace acc::cli

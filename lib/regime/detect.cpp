#include "regime/detect.hpp"

#include "base/error.hpp"
#include "base/text.hpp"

#include <cmath>
#include <limits>

namespace acc::regime {

const char* reason_name(Reason reason) {
    switch (reason) {
    case Reason::below_eta: return "below eta";
    case Reason::at_least_eta: return "at or above eta";
    case Reason::first_interval: return "first interval";
    case Reason::zero_previous_norm: return "previous norm zero";
    case Reason::lr_decay: return "learning-rate decay";
    }
    return "?";
}

NormTable whole_model(const NormTable& per_parameter) {
    NormTable out;
    out.epochs = per_parameter.epochs;
    out.columns = 1;
    out.values.resize(static_cast<size_t>(per_parameter.epochs));
    for (std::int64_t e = 0; e < per_parameter.epochs; ++e) {
        double sum = 0;
        for (std::int64_t c = 0; c < per_parameter.columns; ++c) {
            double n = per_parameter.at(e, c);
            sum += n * n;
        }
        out.values[static_cast<size_t>(e)] = std::sqrt(sum);
    }
    return out;
}

Decisions Decisions::broadcast(std::int64_t count) const {
    if (columns != 1) throw Error("internal error: only a one-column decision table can be broadcast");
    Decisions out;
    out.epochs = epochs;
    out.columns = count;
    for (std::int64_t e = 0; e < epochs; ++e) {
        for (std::int64_t c = 0; c < count; ++c) {
            out.critical.push_back(critical[static_cast<size_t>(e)]);
            out.ratio.push_back(ratio[static_cast<size_t>(e)]);
            out.reason.push_back(reason[static_cast<size_t>(e)]);
        }
    }
    return out;
}

void validate(const Options& options) {
    // The same words as the command line's range check, for configs filled by code.
    if (!(options.eta > 0 && options.eta <= kMaxEta))
        throw UsageError("--eta: must be a number in (0, " + short_number(kMaxEta) + "], not '" +
                         short_number(options.eta) + "'");
    if (options.interval < 1 || options.interval > kMaxInterval)
        throw UsageError("--interval: must be a whole number in [1, " + std::to_string(kMaxInterval) + "], not '" +
                         std::to_string(options.interval) + "'");
}

Decisions detect(const NormTable& norms, const std::vector<double>& lr, const Options& options) {
    validate(options);
    if (static_cast<std::int64_t>(lr.size()) != norms.epochs)
        throw Error("learning rates for " + std::to_string(lr.size()) + " epochs, norms for " +
                    std::to_string(norms.epochs));
    if (static_cast<std::int64_t>(norms.values.size()) != norms.epochs * norms.columns)
        throw Error("internal error: norm table size does not match its shape");

    const std::int64_t E = norms.epochs, C = norms.columns, interval = options.interval;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    Decisions d;
    d.epochs = E;
    d.columns = C;
    d.critical.assign(static_cast<size_t>(E * C), 0);
    d.ratio.assign(static_cast<size_t>(E * C), nan);
    d.reason.assign(static_cast<size_t>(E * C), Reason::below_eta);

    for (std::int64_t e = 0; e < E; ++e) {
        // The decision governing epoch e was taken at the end of epoch `decided`.
        std::int64_t decided = e == 0 ? -1 : ((e - 1) / interval) * interval;
        for (std::int64_t c = 0; c < C; ++c) {
            size_t i = d.at(e, c);
            if (decided <= 0) {
                d.critical[i] = 1;
                d.reason[i] = Reason::first_interval;
                continue;
            }
            double previous = norms.at(decided - interval, c), current = norms.at(decided, c);
            if (previous == 0) {
                d.critical[i] = 1;
                d.ratio[i] = std::numeric_limits<double>::infinity();
                d.reason[i] = Reason::zero_previous_norm;
                continue;
            }
            double ratio = std::fabs(previous - current) / previous;
            d.ratio[i] = ratio;
            d.critical[i] = ratio >= options.eta;
            d.reason[i] = d.critical[i] ? Reason::at_least_eta : Reason::below_eta;
        }
    }
    // A learning-rate decay after epoch e makes e+1 .. (next decision epoch) critical.
    for (std::int64_t e = 0; e + 1 < E; ++e) {
        if (!(lr[static_cast<size_t>(e + 1)] < lr[static_cast<size_t>(e)])) continue;
        std::int64_t next_decision = ((e + 1 + interval - 1) / interval) * interval;
        for (std::int64_t k = e + 1; k <= next_decision && k < E; ++k) {
            for (std::int64_t c = 0; c < C; ++c) {
                size_t i = d.at(k, c);
                d.critical[i] = 1;
                if (d.reason[i] != Reason::first_interval) d.reason[i] = Reason::lr_decay;
            }
        }
    }
    return d;
}

Decisions decide_epoch(const NormTable& earlier, const std::vector<double>& lr, const Options& options) {
    const std::int64_t epoch = earlier.epochs;
    if (static_cast<std::int64_t>(lr.size()) != epoch + 1)
        throw Error("learning rates for " + std::to_string(lr.size()) + " epochs, deciding epoch " +
                    std::to_string(epoch));
    // The row of `epoch` looks only at earlier norms: a placeholder row stands for its own.
    NormTable table = earlier;
    table.epochs = epoch + 1;
    table.values.resize(static_cast<size_t>((epoch + 1) * table.columns), 0.0);
    Decisions all = detect(table, lr, options);
    Decisions out;
    out.epochs = 1;
    out.columns = all.columns;
    const size_t first = all.at(epoch, 0), end = first + static_cast<size_t>(all.columns);
    out.critical.assign(all.critical.begin() + static_cast<std::ptrdiff_t>(first),
                        all.critical.begin() + static_cast<std::ptrdiff_t>(end));
    out.ratio.assign(all.ratio.begin() + static_cast<std::ptrdiff_t>(first),
                     all.ratio.begin() + static_cast<std::ptrdiff_t>(end));
    out.reason.assign(all.reason.begin() + static_cast<std::ptrdiff_t>(first),
                      all.reason.begin() + static_cast<std::ptrdiff_t>(end));
    return out;
}

}  // namespace acc::regime

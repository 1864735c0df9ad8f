#include "regime/summary.hpp"

#include "base/text.hpp"
#include "compress/spec.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace acc::regime {

std::vector<std::int64_t> critical_per_epoch(const Decisions& d, const std::vector<bool>& counted) {
    std::vector<std::int64_t> out(static_cast<size_t>(d.epochs), 0);
    for (std::int64_t e = 0; e < d.epochs; ++e)
        for (std::int64_t c = 0; c < d.columns; ++c)
            if (counted[static_cast<size_t>(c)] && d.critical[d.at(e, c)]) ++out[static_cast<size_t>(e)];
    return out;
}

std::vector<Regime> find_regimes(const Decisions& d, const std::vector<bool>& counted) {
    std::vector<std::int64_t> per_epoch = critical_per_epoch(d, counted);
    std::vector<Regime> regimes;
    for (std::int64_t e = 0; e < d.epochs; ++e) {
        std::int64_t n = per_epoch[static_cast<size_t>(e)];
        if (n == 0) continue;
        if (!regimes.empty() && regimes.back().last == e - 1) {
            regimes.back().last = e;
            regimes.back().peak_critical = std::max(regimes.back().peak_critical, n);
        } else {
            regimes.push_back({e, e, n});
        }
    }
    return regimes;
}

std::vector<CriticalReasons> critical_reasons(const Decisions& d, const std::vector<bool>& counted,
                                              const std::vector<double>& lr) {
    std::vector<CriticalReasons> runs;
    std::int64_t decay = -1;  // the latest epoch whose learning rate dropped
    for (std::int64_t e = 0; e < d.epochs; ++e) {
        if (e > 0 && static_cast<size_t>(e) < lr.size() && lr[static_cast<size_t>(e)] < lr[static_cast<size_t>(e - 1)])
            decay = e;
        std::map<Reason, std::int64_t> count;
        for (std::int64_t c = 0; c < d.columns; ++c)
            if (counted[static_cast<size_t>(c)] && d.critical[d.at(e, c)]) ++count[d.reason[d.at(e, c)]];
        if (count.empty()) continue;
        CriticalReasons run{e, e, {count.begin(), count.end()}, count.count(Reason::lr_decay) ? decay : -1};
        auto same = [&](const CriticalReasons& a) {
            if (a.last != e - 1 || a.decay_epoch != run.decay_epoch || a.reasons.size() != run.reasons.size())
                return false;
            for (size_t i = 0; i < a.reasons.size(); ++i)
                if (a.reasons[i].first != run.reasons[i].first) return false;
            return true;
        };
        if (!runs.empty() && same(runs.back())) {
            runs.back().last = e;
            for (size_t i = 0; i < run.reasons.size(); ++i)
                runs.back().reasons[i].second = std::max(runs.back().reasons[i].second, run.reasons[i].second);
        } else {
            runs.push_back(std::move(run));
        }
    }
    return runs;
}

std::string reasons_text(const CriticalReasons& run, const std::vector<double>& lr, double eta,
                         std::int64_t interval, std::int64_t columns) {
    auto share = [&](std::int64_t n) {
        return columns > 1 ? " (" + std::to_string(n) + "/" + std::to_string(columns) + " parameters)" : std::string();
    };
    std::vector<std::string> parts;
    for (const auto& [reason, n] : run.reasons) {
        switch (reason) {
        case Reason::first_interval:
            parts.push_back("first interval (epochs 0-" + std::to_string(interval) + " are always critical)");
            break;
        case Reason::at_least_eta: parts.push_back("norm change r >= eta " + short_number(eta) + share(n)); break;
        case Reason::zero_previous_norm: parts.push_back("zero previous norm" + share(n)); break;
        case Reason::lr_decay: {
            const auto d = static_cast<size_t>(run.decay_epoch);
            parts.push_back(run.decay_epoch > 0 && d < lr.size()
                                ? "the learning rate drops from " + short_number(lr[d - 1]) + " to " +
                                      short_number(lr[d]) + " at epoch " + std::to_string(run.decay_epoch)
                                : std::string("the learning rate drops"));
            break;
        }
        case Reason::below_eta: break;  // never critical
        }
    }
    const std::string span = run.first == run.last ? "epoch " + std::to_string(run.first)
                                                   : "epochs " + std::to_string(run.first) + "-" + std::to_string(run.last);
    return span + ": " + join(parts, "; ");
}

std::int64_t timeline_block(std::int64_t epochs, std::int64_t interval, std::int64_t width) {
    std::int64_t block = std::max<std::int64_t>(1, interval);
    if ((epochs + block - 1) / block > width) block = (epochs + width - 1) / width;
    return block;
}

std::string timeline(const Decisions& d, const std::vector<bool>& counted, std::int64_t block) {
    const std::int64_t columns = std::count(counted.begin(), counted.end(), true);
    std::vector<std::int64_t> per_epoch = critical_per_epoch(d, counted);
    std::string line;
    for (std::int64_t start = 0; start < d.epochs; start += block) {
        std::int64_t end = std::min(d.epochs, start + block), cells = (end - start) * columns, critical = 0;
        for (std::int64_t e = start; e < end; ++e) critical += per_epoch[static_cast<size_t>(e)];
        char c = '.';
        if (critical > 0 && critical == cells)
            c = '#';
        else if (critical * 2 >= cells && critical > 0)
            c = '+';
        else if (critical > 0)
            c = '-';
        line += c;
    }
    return line;
}

std::vector<LevelShare> level_shares(const CompressionPlan& plan, const std::vector<bool>& counted) {
    std::vector<double> cells(plan.levels.size(), 0);
    double total = 0;
    for (size_t i = 0; i < plan.level.size(); ++i) {
        if (!counted[i % counted.size()]) continue;
        cells[static_cast<size_t>(plan.level[i])] += 1;
        total += 1;
    }
    std::vector<LevelShare> out;
    for (size_t l = 0; l < plan.levels.size(); ++l)
        if (cells[l] > 0) out.push_back({plan.levels[l].text(), cells[l] / total});
    return out;
}

Communication compression_communication(const CompressionPlan& plan, const std::vector<std::vector<std::int64_t>>& shapes,
                                        const std::vector<std::int64_t>& steps, const compress::Spec& low,
                                        const compress::Spec& high) {
    const size_t P = shapes.size();
    const size_t E = P ? plan.level.size() / P : 0;
    // Floats per step of every (level, parameter) pair, computed once.
    std::vector<std::vector<double>> per_level(plan.levels.size(), std::vector<double>(P));
    for (size_t l = 0; l < plan.levels.size(); ++l)
        for (size_t p = 0; p < P; ++p) per_level[l][p] = compress::wire_floats(plan.levels[l], shapes[p]);
    const compress::Spec &low_spec = low, &high_spec = high, &none = compress::no_compression();
    double low_step = 0, high_step = 0;
    for (size_t p = 0; p < P; ++p) {
        bool matrix = shapes[p].size() > 1;
        low_step += compress::wire_floats(matrix ? low_spec : none, shapes[p]);
        high_step += compress::wire_floats(matrix ? high_spec : none, shapes[p]);
    }
    Communication c;
    std::int64_t total_steps = 0;
    for (auto s : steps) total_steps += s;
    c.per_step = total_steps == 0;
    for (size_t e = 0; e < E; ++e) {
        double weight = c.per_step ? 1.0 / static_cast<double>(E) : static_cast<double>(steps[e]);
        double floats = 0;
        for (size_t p = 0; p < P; ++p) floats += per_level[static_cast<size_t>(plan.level[e * P + p])][p];
        c.schedule += weight * floats;
        c.low += weight * low_step;
        c.high += weight * high_step;
    }
    return c;
}

Communication batch_communication(const BatchPlan& plan, double model_floats, double samples_per_epoch,
                                  std::int64_t low, std::int64_t high) {
    Communication c;
    c.per_step = !(samples_per_epoch > 0);
    // Without a dataset size, count rounds relative to one step of the small batch per epoch.
    double samples = c.per_step ? static_cast<double>(low) : samples_per_epoch;
    for (std::int64_t batch : plan.batch_size) {
        c.schedule += std::ceil(samples / static_cast<double>(batch)) * model_floats;
        c.low += std::ceil(samples / static_cast<double>(low)) * model_floats;
        c.high += std::ceil(samples / static_cast<double>(high)) * model_floats;
    }
    return c;
}

}  // namespace acc::regime

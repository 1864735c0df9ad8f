// train-dist's settings (options.cpp fills them from the command line). No LibTorch here.
#pragma once

#include "comm/backend.hpp"
#include "comm/rendezvous.hpp"
#include "compress/spec.hpp"
#include "io/header.hpp"
#include "plan/auto_plan.hpp"
#include "plan/run_plan.hpp"
#include "regime/detect.hpp"
#include "regime/gravac.hpp"
#include "train/config.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace acc::app {

/// How the gradient of each parameter is combined, epoch by epoch.
enum class Mode {
    fixed,      ///< --compress SPEC (or none): one level for every matrix parameter
    schedule,   ///< --schedule FILE: a regime-detect schedule (compression or batch mode)
    accordion,  ///< --accordion: Accordion's rule run online on rank 0's gradients
    gravac,     ///< --gravac FAMILY: GraVAC's compression factor, chosen every step (exchange/gravac.hpp)
    automatic,  ///< --auto: per parameter the level of least predicted step time within Accordion's budget
};

/// --levels, --auto-margin and --auto-drift: the automatic mode's settings (docs/auto.md).
struct AutoConfig {
    /// Candidate levels besides none, --low and --high (which are always candidates).
    std::vector<compress::Spec> levels = compress::kDefaultAutoLevels;
    double margin = plan::kDefaultAutoMargin;  ///< a plan must be predicted this share faster than uncompressed
    double drift = plan::kDefaultAutoDrift;    ///< measure again when a step's time differs this much from its prediction
};

/// --low, --high, --eta and --interval: the run plan's settings for Accordion online.
using AccordionConfig = plan::AccordionSettings;

struct TrainDistConfig {
    train::TrainConfig train;
    comm::RendezvousConfig rendezvous;
    std::optional<compress::Spec> compress;  ///< --compress, parsed where it is read; not given: none
    std::string schedule;             ///< --schedule file; empty: no schedule
    bool schedule_extend_last = false;  ///< --schedule-extend last: a short schedule repeats its last epoch
    bool accordion = false;           ///< --accordion
    AccordionConfig accordion_config;
    std::string accordion_option;     ///< the first of --low, --high, --eta, --interval given (they need --accordion or --auto)
    bool automatic = false;           ///< --auto
    AutoConfig auto_config;
    std::optional<regime::GravacFamily> gravac;  ///< --gravac FAMILY; unset: not GraVAC
    /// --gravac-* (--gravac-policy and --gravac-throughput included); smoothing 0: the paper's min(1, N / 100)
    regime::GravacSettings gravac_settings;
    bool batch_size_given = false;    ///< --batch-size was on the command line (a batch schedule sets it)
    std::optional<comm::Backend> backend;  ///< --backend; unset: comm::default_backend(train.device)
    double bucket_mb = 25;            ///< MiB per bucket of uncompressed gradients (DDP's bucket_cap_mb)
    double first_bucket_mb = 1;       ///< MiB of the first bucket (DDP's first bucket)
    std::int64_t dgc_warmup_epochs = 0;
    std::string metrics = "metrics.h5";  ///< metrics file (accordion.metrics), written by rank 0
    std::string checkpoint_dir;          ///< empty: the metrics file's directory
    bool resume = false;
    bool force = false;  ///< replace an output that is read-only or not HDF5
    bool json = false;
    io::Provenance provenance;

    Mode mode() const {
        return gravac      ? Mode::gravac
               : automatic     ? Mode::automatic
               : accordion     ? Mode::accordion
               : !schedule.empty() ? Mode::schedule
                                   : Mode::fixed;
    }
    /// The level of Mode::fixed.
    compress::Spec fixed_level() const { return compress ? *compress : compress::no_compression(); }
};

/// GraVAC's settings for `world_size` ranks: the options, with the paper's smoothing
/// min(1, N / 100) unless --gravac-smoothing was given.
regime::GravacSettings gravac_settings(const TrainDistConfig& config, std::int64_t world_size);

}  // namespace acc::app

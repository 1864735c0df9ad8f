// comm-profile: time collectives over a sweep of message sizes the way
// nccl-tests does, fit the alpha-beta model, and write comm.h5. See man/comm-profile.1.
#include "cli/tool.hpp"
#include "app/comm_profile.hpp"
#include "train/config.hpp"

int main(int argc, char** argv) {
    acc::comm::ProfileConfig config;
    return acc::cli::run_tool(
        "comm-profile",
        "Time collectives (allreduce, allgather, broadcast, reduce_scatter) over a sweep of message sizes,\n"
        "report time, algbw and busbw as nccl-tests does, and fit t(S) = alpha + S/B per collective;\n"
        "with --model, also time a model's forward and backward pass per step.",
        argc, argv,
        [&](CLI::App& app) {
            app.add_option("--collectives", config.collectives,
                           "Comma-separated collectives: allreduce, allgather, broadcast, reduce_scatter "
                           "[allreduce,allgather,broadcast]")
                ->delimiter(',')
                ->default_str("");
            app.add_option("-b,--min-bytes", config.min_bytes, "Smallest message size in bytes (K, M, G: binary)");
            app.add_option("-e,--max-bytes", config.max_bytes, "Largest message size in bytes (K, M, G: binary)");
            app.add_option("-f,--step-factor", config.factor, "Multiply the size by this much between rows")
                ->check(acc::cli::whole_number(2, 1024));
            app.add_option("-n,--iters", config.iterations, "Timed iterations per size")
                ->check(acc::cli::whole_number(1, 1000000));
            app.add_option("-w,--warmup-iters", config.warmup, "Untimed iterations per size before the timed ones")
                ->check(acc::cli::whole_number(0, 1000000));
            app.add_flag("-c,--check", config.check,
                         "Check every collective on integer-valued data with exactly known results (#wrong)");
            app.add_option("--device", config.device, "cpu (Gloo) or cuda (NCCL, in CUDA builds)")
                ->check(CLI::IsMember({"cpu", "cuda"}));
            app.add_option("--model", config.model,
                           "Also time the forward and backward pass of this model's training step")
                ->check(CLI::IsMember(acc::train::model_names()));
            app.add_option("--batch-size", config.batch_size,
                           "Samples per rank in the timed steps (streams for lstm) [128]")
                ->check(acc::cli::whole_number(1, 1 << 20))
                ->default_str("");
            app.add_option("-o,--output", config.output,
                           "Write the profile to this HDF5 file (accordion.comm-profile)");
            auto* csv = app.add_flag("--csv", config.csv, "Print the results as CSV on stdout");
            app.add_flag("--json", config.json, "Print the results and fits as JSON on stdout")->excludes(csv);
            acc::comm::add_rendezvous_options(app, config.rendezvous);
        },
        [&] {
            config.provenance = acc::cli::provenance();
            return acc::comm::run_profile(config, argc, argv);
        });
}

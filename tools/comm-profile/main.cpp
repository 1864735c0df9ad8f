// comm-profile: time collectives over a sweep of message sizes the way
// nccl-tests does, fit the alpha-beta model, and write comm.h5. See man/comm-profile.1.
#include "app/build_info.hpp"
#include "comm-profile/driver.hpp"
#include "cli/tool.hpp"

int main(int argc, char** argv) {
    acc::app::ProfileConfig config;
    return acc::cli::run_tool(
        "comm-profile", acc::app::comm_profile_description(), argc, argv,
        [&](CLI::App& app) {
            acc::app::add_comm_profile_options(app, config);
            acc::cli::add_build_details(app, acc::app::build_details());
        },
        [&] {
            config.provenance = acc::cli::provenance();
            return acc::app::run_profile(config, argc, argv);
        });
}

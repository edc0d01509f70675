// kvscope-cli's entry point: the program is kvscope::cli::run (cli.cpp).
#include "clicommon.h"

int main(int argc, char** argv) {
    kvscope::cli::exitNow(kvscope::cli::run(argc, argv));
}

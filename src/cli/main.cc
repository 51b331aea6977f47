// lancet command-line entry point: dispatches to one file per subcommand.
#include <cstdio>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  if (argc >= 2 && (std::strcmp(argv[1], "--version") == 0)) {
    std::printf("lancet %s\n", LANCET_VERSION);
    return 0;
  }
  std::fprintf(stderr, "usage: lancet <command> [options]\n");
  return 2;
}

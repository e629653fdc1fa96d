// gridtrain: MPI training of deep-learning models on a dp × tp × pp process grid.
#include "gridtrain/app/cli.hpp"

int main(int argc, char** argv) { return gridtrain::cli_main(argc, argv); }

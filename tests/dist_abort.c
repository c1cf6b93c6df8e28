/* nb_process_group_abort ends the whole job: rank 1 aborts with code 3 while every other rank
 * waits in a barrier that rank 1 never joins. tests/CMakeLists.txt runs it under mpiexec with 2
 * ranks and expects a non-zero exit, no "passed the barrier" line, and an end within the
 * timeout (without the abort, the job hangs). */
#include <stdio.h>

#include "nabla.h"

int main(void)
{
    nb_process_group *pg = nb_process_group_mpi();
    if (!pg) {
        fprintf(stderr, "dist_abort: %s\n", nb_last_error());
        return 1;
    }
    if (nb_process_group_rank(pg) == 1) {
        fprintf(stderr, "rank 1: aborting the job\n");
        nb_process_group_abort(pg, 3);
        fprintf(stderr, "rank 1: nb_process_group_abort returned\n");
        return 1;
    }
    nb_status st = nb_barrier(pg);
    printf("rank %d passed the barrier (%s)\n", nb_process_group_rank(pg), nb_status_name(st));
    nb_process_group_free(pg);
    return 0;
}

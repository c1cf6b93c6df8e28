/* Data-parallel training with nabla/dist.h, as PyTorch's DistributedDataParallel recipe: start it
 * as `mpiexec -n 2 ./train_ddp [DATA_DIR]` (as root, Open MPI also wants
 * OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1). Each process trains the same MLP on
 * its half of every Fashion-MNIST epoch; the wrapper averages the gradients during backward, so
 * the replicas stay equal. Run alone, it is a group of one. Rank 0 prints. */
#include <stdio.h>

#include "nabla.h"

#define CHECK(x)                                                                                 \
    do {                                                                                         \
        if (!(x)) {                                                                              \
            fprintf(stderr, "rank %d: %s: %s\n", rank, #x, nb_last_error());                     \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

int main(int argc, char **argv)
{
    int rank = 0;
    const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
    nb_process_group *pg = nb_process_group_mpi();
    CHECK(pg);
    rank = nb_process_group_rank(pg);
    int size = nb_process_group_size(pg);

    nb_manual_seed(0); /* the same initial weights everywhere (the wrapper sends rank 0's anyway) */
    nb_module *layers[4] = {nb_flatten_module(1, -1), nb_linear_module(784, 256, true, NULL), nb_relu_module(),
                            nb_linear_module(256, 10, true, NULL)};
    nb_module *net = nb_sequential(layers, 4);
    CHECK(net);
    nb_ddp *ddp = nb_ddp_create(pg, net, NULL);
    CHECK(ddp);
    nb_tensor *params[4];
    nb_module_parameters(net, params, 4);
    nb_sgd_params sp = nb_sgd_params_default();
    sp.lr = 0.05;
    sp.momentum = 0.9;
    nb_optim *opt = nb_optim_sgd(params, 4, &sp);
    CHECK(opt);

    nb_dataset *train = nb_dataset_fashion_mnist(dir, true);
    CHECK(train);
    nb_data_loader_params lp = nb_data_loader_params_default();
    lp.batch_size = 64; /* per process: the global batch is size * 64 */
    lp.shuffle = true;  /* one permutation per epoch, the same on every rank */
    lp.num_replicas = size;
    lp.rank = rank;
    nb_data_loader *loader = nb_data_loader_create(train, &lp);
    CHECK(loader);

    for (int epoch = 0; epoch < 2; epoch++) {
        double loss_sum = 0;
        int64_t batches = 0;
        nb_tensor *x, *y;
        bool done = false;
        while (nb_data_loader_next(loader, &x, &y, &done) == NB_OK && !done) {
            nb_scope *s = nb_scope_begin();
            nb_tensor *loss = nb_cross_entropy(nb_ddp_forward(ddp, x), y, NULL);
            CHECK(loss);
            CHECK(nb_optim_zero_grad(opt) == NB_OK);
            CHECK(nb_backward(loss, NULL, 0) == NB_OK); /* the gradients are the ranks' mean */
            CHECK(nb_optim_step(opt) == NB_OK);
            double l = 0;
            nb_item(loss, &l);
            loss_sum += l;
            batches++;
            nb_scope_end(s);
            nb_tensor_free(x);
            nb_tensor_free(y);
        }
        /* the mean training loss over every rank's batches */
        nb_tensor *stats = nb_tensor_from_data((double[]){loss_sum, (double)batches}, (int64_t[]){2}, 1,
                                               &(nb_tensor_params){.dtype = NB_FLOAT64});
        CHECK(stats && nb_all_reduce(pg, stats, NB_REDUCE_OP_SUM) == NB_OK);
        const double *v = nb_tensor_data_ptr(stats);
        if (rank == 0) printf("epoch %d: train loss %.4f over %d processes\n", epoch + 1, v[0] / v[1], size);
        nb_tensor_free(stats);
    }
    nb_data_loader_free(loader);
    nb_dataset_free(train);
    nb_optim_free(opt);
    nb_ddp_free(ddp);
    nb_module_free(net);
    nb_process_group_free(pg);
    return 0;
}

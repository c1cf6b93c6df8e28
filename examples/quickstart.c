/* The README's example: tensors, an op, backward. */
#include <stdio.h>

#include "nabla.h"

int main(void)
{
    nb_scope *s = nb_scope_begin(); /* owns every tensor made below */
    nb_tensor_params p = nb_tensor_params_default();
    p.requires_grad = true;
    float wdata[6] = {1, 2, 3, 4, 5, 6};
    nb_tensor *w = nb_tensor_from_data(wdata, (int64_t[]){2, 3}, 2, &p);
    nb_tensor *x = nb_ones((int64_t[]){3}, 1, NULL);
    nb_tensor *y = nb_sum(nb_relu(nb_matmul(w, x)), NULL, 0, false); /* sum(relu(W x)) */
    if (!y || nb_backward(y, NULL, NB_BACKWARD_DEFAULT) != NB_OK) {
        fprintf(stderr, "error: %s\n", nb_last_error());
        nb_scope_end(s);
        return 1;
    }
    nb_tensor_print(y, stdout);                 /* tensor(21., grad_fn=<SumBackward0>) */
    nb_tensor_print(nb_tensor_grad(w), stdout); /* dy/dW = [[1, 1, 1], [1, 1, 1]] */
    nb_scope_end(s);
    return 0;
}

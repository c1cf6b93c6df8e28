/* Built against an installed nabla: computes 1 + 2 through the library. */
#include <stdio.h>

#include "nabla.h"

int main(void)
{
    nb_scope *s = nb_scope_begin();
    double v = 0;
    nb_tensor *t = nb_add(nb_scalar_tensor(1, NULL), nb_scalar_tensor(2, NULL));
    int ok = t && nb_item(t, &v) == NB_OK && v == 3;
    printf("consumer: %s (%s)\n", ok ? "ok" : "FAILED", ok ? nb_version() : nb_last_error());
    nb_scope_end(s);
    return ok ? 0 : 1;
}

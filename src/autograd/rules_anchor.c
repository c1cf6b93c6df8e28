/* One strong reference into each rules_*.c file, so that a static link of libnabla.a includes
 * every backward rule (the rule table in rules.c refers to rules weakly). A new rules file adds
 * one line here. */
#include "autograd/autograd_impl.h"

nb_status nb__bw_VIEW(nb_node *, nb_tensor *, nb_tensor **);    /* rules_view.c */
nb_status nb__bw_ADD(nb_node *, nb_tensor *, nb_tensor **);     /* rules_binary.c */
nb_status nb__bw_EXP(nb_node *, nb_tensor *, nb_tensor **);     /* rules_unary.c */
nb_status nb__bw_SUM(nb_node *, nb_tensor *, nb_tensor **);     /* rules_reduce.c */
nb_status nb__bw_BMM(nb_node *, nb_tensor *, nb_tensor **);     /* rules_linalg.c */
nb_status nb__bw_CAT(nb_node *, nb_tensor *, nb_tensor **);     /* rules_index.c */
nb_status nb__bw_BERNOULLI(nb_node *, nb_tensor *, nb_tensor **); /* rules_random.c */
nb_status nb__bw_CONV2D(nb_node *, nb_tensor *, nb_tensor **);  /* rules_nn.c */
nb_status nb__bw_LSTM_LAYER(nb_node *, nb_tensor *, nb_tensor **); /* rules_rnn.c */

const void *const nb__rules_anchor[] = {
    (const void *)nb__bw_VIEW, (const void *)nb__bw_ADD, (const void *)nb__bw_EXP,
    (const void *)nb__bw_SUM,  (const void *)nb__bw_BMM, (const void *)nb__bw_CAT,
    (const void *)nb__bw_BERNOULLI, (const void *)nb__bw_CONV2D,
    (const void *)nb__bw_LSTM_LAYER,
};

/* The per-thread error message and status. */
#include <stdarg.h>
#include <string.h>

#include "core/error_impl.h"

#define NB_ERR_MSG_MAX 1024

static _Thread_local char tl_msg[NB_ERR_MSG_MAX];
static _Thread_local nb_status tl_status = NB_OK;

static void set_error(nb_status status, const char *fmt, va_list ap)
{
    tl_status = status;
    vsnprintf(tl_msg, sizeof tl_msg, fmt, ap);
}

nb_status nb__err(nb_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_error(status, fmt, ap);
    va_end(ap);
    return status;
}

void *nb__err_null(nb_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_error(status, fmt, ap);
    va_end(ap);
    return NULL;
}

nb_status nb__err_prefix(const char *prefix)
{
    nb_status st = tl_status != NB_OK ? tl_status : NB_ERR_INTERNAL;
    size_t n = strlen(prefix);
    if (strncmp(tl_msg, prefix, n) == 0 && tl_msg[n] == ':') return tl_status = st;
    char inner[NB_ERR_MSG_MAX];
    memcpy(inner, tl_msg, sizeof inner);
    return nb__err(st, "%s: %s", prefix, inner);
}

const char *nb_last_error(void) { return tl_msg; }

nb_status nb_last_status(void) { return tl_status; }

void nb_clear_error(void)
{
    tl_status = NB_OK;
    tl_msg[0] = '\0';
}

const char *nb_status_name(nb_status s)
{
    switch (s) {
    case NB_OK: return "ok";
    case NB_ERR_INVALID_ARG: return "invalid argument";
    case NB_ERR_SHAPE: return "shape mismatch";
    case NB_ERR_DTYPE: return "bad dtype";
    case NB_ERR_DEVICE: return "device error";
    case NB_ERR_OOM: return "out of memory";
    case NB_ERR_IO: return "i/o error";
    case NB_ERR_FORMAT: return "bad format";
    case NB_ERR_UNSUPPORTED: return "unsupported";
    case NB_ERR_AUTOGRAD: return "autograd error";
    case NB_ERR_INTERNAL: return "internal error";
    case NB_ERR_COMM: return "communication error";
    }
    return "unknown status";
}

const char *nb_version(void) { return NB_VERSION_STRING; }

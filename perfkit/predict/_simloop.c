/* The batcher simulator's open-loop event loop, compiled: perfkit/predict/_sim.py's _run_open
 * (the rules of its module docstring, each cited there from triton-inference-server/core), step for
 * step and in the same floating-point operations, so that both give the same batches and ends.
 * Scoring a space runs this loop tens of millions of times; in Python it is ~0.5 us a batch.
 *
 * run_open(arr, pref, table, sizes, ends, instances, big, delay, f, bound, counted_from, allowed)
 *   arr     float64 buffer: the arrival times (s), sorted
 *   pref    int64 buffer: the preferred sizes, sorted (one of them when there is none: big)
 *   table   float64 buffer: execution time (s) by batch size 0..big
 *   sizes   int64 buffer (written): each batch's size, len(arr) at least
 *   ends    float64 buffer (written): each batch's end (s), len(arr) at least
 * returns the number of batches, or -1 once more than `allowed` requests from `counted_from` on
 * took longer than `bound` (s): the percentile is past it, whatever follows.
 *
 * Built with -ffp-contract=off: a fused multiply-add would round differently from Python. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

static Py_ssize_t right_of(const double *a, double x, Py_ssize_t lo, Py_ssize_t hi) {
    while (lo < hi) { /* bisect.bisect_right */
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (x < a[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

static Py_ssize_t left_of(const double *a, double x, Py_ssize_t lo, Py_ssize_t hi) {
    while (lo < hi) { /* bisect.bisect_left */
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (a[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static Py_ssize_t preferred_at_most(const int64_t *pref, Py_ssize_t npref, int64_t queued) {
    Py_ssize_t lo = 0, hi = npref; /* bisect.bisect_right(pref, queued) - 1 */
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (queued < pref[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo - 1;
}

static Py_ssize_t loop(const double *arr, Py_ssize_t n, const int64_t *pref, Py_ssize_t npref, const double *table,
                       int64_t *sizes, double *ends, double *free_at, Py_ssize_t instances, int64_t big, double delay,
                       double f, double bound, Py_ssize_t counted_from, int64_t allowed) {
    double g = 1 - f, dev = 0.0;
    int64_t pmin = pref[0], over = 0;
    int single = npref == 1;
    Py_ssize_t h = 0, batches = 0;
    for (Py_ssize_t i = 0; i < instances; i++)
        free_at[i] = arr[0];
    while (h < n) {
        /* The instance free first (heapq's smallest; which of equal ones does not matter). */
        Py_ssize_t first = 0;
        for (Py_ssize_t i = 1; i < instances; i++)
            if (free_at[i] < free_at[first])
                first = i;
        double tf = free_at[first], a_h = arr[h];
        double td = tf > a_h ? tf : a_h;
        int64_t m;
        if (big == 1) {
            m = 1;
        } else {
            Py_ssize_t top = h + big < n ? h + (Py_ssize_t)big : n;
            int64_t queued = right_of(arr, td, h, top) - h;
            double deadline = a_h + delay;
            int exceeded = delay > 0 && td >= deadline;
            if (delay > 0 && !exceeded && queued < pmin) {
                Py_ssize_t k = h + (Py_ssize_t)pmin - 1;
                if (k < n && arr[k] < deadline) {
                    td = arr[k];
                } else {
                    td = deadline;
                    exceeded = 1;
                }
                queued = right_of(arr, td, h, top) - h;
            }
            if (!exceeded && queued >= pmin)
                m = single ? pmin : pref[preferred_at_most(pref, npref, queued)];
            else
                m = queued;
        }
        double s = table[m], end;
        if (f > 0) {
            double start = td + g * s;
            if (dev > start)
                start = dev;
            end = dev = start + f * s;
        } else {
            end = td + s;
        }
        free_at[first] = end;
        sizes[batches] = m;
        ends[batches] = end;
        batches++;
        if (end - a_h > bound && h >= counted_from) {
            over += left_of(arr, end - bound, h, h + (Py_ssize_t)m) - h;
            if (over > allowed)
                return -1;
        }
        h += (Py_ssize_t)m;
    }
    return batches;
}

static int check(Py_buffer *b, Py_ssize_t itemsize, Py_ssize_t at_least, const char *what) {
    if (b->len % itemsize != 0 || b->len / itemsize < at_least) {
        PyErr_Format(PyExc_ValueError, "run_open: %s is %zd bytes, needs %zd items of %zd bytes", what, b->len,
                     at_least, itemsize);
        return -1;
    }
    return 0;
}

static PyObject *run_open(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer arr, pref, table, sizes, ends;
    Py_ssize_t instances, counted_from;
    long long big, allowed;
    double delay, f, bound;
    if (!PyArg_ParseTuple(args, "y*y*y*w*w*nLdddnL", &arr, &pref, &table, &sizes, &ends, &instances, &big, &delay,
                          &f, &bound, &counted_from, &allowed))
        return NULL;
    Py_ssize_t n = arr.len / (Py_ssize_t)sizeof(double), batches = -2;
    double *free_at = NULL;
    if (n < 1 || instances < 1 || big < 1) {
        PyErr_SetString(PyExc_ValueError, "run_open: needs an arrival, an instance and max batch >= 1");
        goto done;
    }
    if (check(&arr, sizeof(double), 1, "arr") || check(&pref, sizeof(int64_t), 1, "pref") ||
        check(&table, sizeof(double), (Py_ssize_t)big + 1, "table") || check(&sizes, sizeof(int64_t), n, "sizes") ||
        check(&ends, sizeof(double), n, "ends"))
        goto done;
    const int64_t *p = pref.buf;
    Py_ssize_t npref = pref.len / (Py_ssize_t)sizeof(int64_t);
    for (Py_ssize_t i = 0; i < npref; i++) {
        if (p[i] < 1 || p[i] > big || (i > 0 && p[i] <= p[i - 1])) {
            PyErr_SetString(PyExc_ValueError, "run_open: preferred sizes must rise within 1..big");
            goto done;
        }
    }
    free_at = malloc(sizeof(double) * (size_t)instances);
    if (free_at == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS batches = loop(arr.buf, n, p, npref, table.buf, sizes.buf, ends.buf, free_at, instances,
                                          (int64_t)big, delay, f, bound, counted_from, (int64_t)allowed);
    Py_END_ALLOW_THREADS
done:
    free(free_at);
    PyBuffer_Release(&arr);
    PyBuffer_Release(&pref);
    PyBuffer_Release(&table);
    PyBuffer_Release(&sizes);
    PyBuffer_Release(&ends);
    if (batches == -2)
        return NULL;
    return PyLong_FromSsize_t(batches);
}

static PyMethodDef methods[] = {
    {"run_open", run_open, METH_VARARGS, "The open-loop event loop of perfkit.predict._sim._run_open."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_simloop", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__simloop(void) { return PyModule_Create(&module); }

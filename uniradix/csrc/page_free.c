/* The token allocator's checked free (`uniradix.memory.allocator.TokenSlotAllocator.free`)
 * in one call: the pages holding the given slots are proved inside the pool, allocated and
 * (at page size 1) distinct, then pushed onto the free stack in the order the Python path
 * pushes them: the sorted distinct pages, highest first, so the smallest is on top.
 *
 * Nothing is written unless every check passes: on bad input the function returns -1 with
 * the allocator unchanged, and the caller runs the Python path, which raises the error it
 * always raised (the messages are made in one place). The GIL stays held: the work is a few
 * microseconds, and holding it keeps the allocator's state whole for any other thread. */
#include "native.h" /* first: it includes Python.h, which must precede the C headers */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Sorts `a[0..n)` ascending, using `tmp` (n values) and `bounds` (n + 1 entries). Frees
 * are mostly runs of pages handed out together, so this is a natural merge sort: the
 * ascending runs (descending ones reversed) are found in one pass and merged pairwise,
 * O(n log runs). Returns the buffer holding the result, `a` or `tmp`. */
static int64_t *sort_pages(int64_t *a, int64_t *tmp, Py_ssize_t *bounds, Py_ssize_t n) {
    Py_ssize_t runs = 0, i = 0;
    while (i < n) {
        Py_ssize_t j = i + 1;
        if (j < n && a[j] < a[i]) {
            while (j < n && a[j] < a[j - 1]) j++;
            for (Py_ssize_t lo = i, hi = j - 1; lo < hi; lo++, hi--) {
                int64_t t = a[lo];
                a[lo] = a[hi];
                a[hi] = t;
            }
        } else {
            while (j < n && a[j] >= a[j - 1]) j++;
        }
        bounds[runs++] = i;
        i = j;
    }
    bounds[runs] = n;
    int64_t *src = a, *dst = tmp;
    while (runs > 1) {
        Py_ssize_t merged = 0;
        for (Py_ssize_t r = 0; r < runs; r += 2) {
            Py_ssize_t lo = bounds[r], mid = bounds[r + 1];
            Py_ssize_t hi = r + 2 <= runs ? bounds[r + 2] : mid;
            Py_ssize_t x = lo, y = mid, k = lo;
            while (x < mid && y < hi) dst[k++] = src[y] < src[x] ? src[y++] : src[x++];
            while (x < mid) dst[k++] = src[x++];
            while (y < hi) dst[k++] = src[y++];
            bounds[merged++] = lo;
        }
        bounds[merged] = n;
        runs = merged;
        int64_t *t = src;
        src = dst;
        dst = t;
    }
    return src;
}

/* The page of each slot of a 1-D int64 buffer, read in place: `step` apart (a node value
 * at page size > 1 names each page by its first slot), `count` of them. */
typedef struct {
    const char *base;
    Py_ssize_t stride, count, page_size;
    int shift; /* log2(page_size) for a power of two (no division), else -1 */
} SlotPages;

static inline int64_t page_at(const SlotPages *s, Py_ssize_t i) {
    int64_t slot;
    memcpy(&slot, s->base + i * s->stride, sizeof slot);
    if (slot < 0) return 0; /* out of range, whatever a division would round it to */
    return s->shift >= 0 ? slot >> s->shift : slot / s->page_size;
}

/* The common case, pages ascending as allocations hand them out: checks them in place
 * without a copy. Returns the count of distinct pages, -1 to refuse, or -2 when a page is
 * below the one before (the caller sorts a copy). */
static Py_ssize_t check_ascending(const SlotPages *s, int64_t num_pages, const uint8_t *in_use) {
    int64_t prev = 0;
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < s->count; i++) {
        int64_t p = page_at(s, i);
        if (p < 1 || p > num_pages) return -1;
        if (p < prev) return -2;
        if (p == prev) {
            if (s->page_size == 1) return -1; /* a slot given twice */
            continue;
        }
        if (!in_use[p]) return -1;
        prev = p;
        m++;
    }
    return m;
}

/* Any order: the pages copied to `pages`, sorted, deduplicated and checked. Returns the
 * count of distinct pages left at the front of `*pages`, or -1 to refuse. */
static Py_ssize_t check_sorted_copy(const SlotPages *s, int64_t **pages, int64_t *tmp,
                                    Py_ssize_t *bounds, int64_t num_pages,
                                    const uint8_t *in_use) {
    int64_t *p = *pages;
    Py_ssize_t n = s->count;
    for (Py_ssize_t i = 0; i < n; i++) {
        p[i] = page_at(s, i);
        if (p[i] < 1 || p[i] > num_pages) return -1;
    }
    *pages = p = sort_pages(p, tmp, bounds, n);
    Py_ssize_t m = n ? 1 : 0;
    for (Py_ssize_t i = 1; i < n; i++) {
        if (p[i] != p[m - 1])
            p[m++] = p[i];
        else if (s->page_size == 1)
            return -1; /* a slot given twice */
    }
    for (Py_ssize_t i = 0; i < m; i++)
        if (!in_use[p[i]]) return -1;
    return m;
}

static int shift_of(Py_ssize_t page_size) {
    int shift = 0;
    while (((Py_ssize_t)1 << shift) < page_size) shift++;
    return ((Py_ssize_t)1 << shift) == page_size ? shift : -1;
}

/* Frees a node value's pages, pushed in the order given. They are distinct by contract; a
 * page met twice would be pushed twice, so it is refused, the flags cleared so far set back.
 * Returns the new top, or -1 to refuse (no exception set), -2 with an exception set. */
static Py_ssize_t free_node_value(const SlotPages *s, int64_t num_pages, uint8_t *in_use,
                                  int64_t *stack, Py_ssize_t top) {
    Py_ssize_t m = s->count;
    for (Py_ssize_t i = 0; i < m; i++) {
        int64_t p = page_at(s, i);
        if (p < 1 || p > num_pages || !in_use[p]) return -1;
    }
    if (m > num_pages - top) {
        PyErr_Format(PyExc_ValueError, "free_slots: %zd pages freed with room for %zd", m,
                     (Py_ssize_t)(num_pages - top));
        return -2;
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        int64_t p = page_at(s, i);
        if (!in_use[p]) {
            for (Py_ssize_t j = 0; j < i; j++) in_use[page_at(s, j)] = 1;
            PyErr_Format(PyExc_ValueError, "free: page %lld given twice in a node value",
                         (long long)p);
            return -2;
        }
        in_use[p] = 0;
    }
    for (Py_ssize_t i = 0; i < m; i++) stack[top + m - 1 - i] = page_at(s, i);
    return top + m;
}

PyObject *native_free_slots(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *slots_obj, *in_use_obj, *stack_obj;
    Py_ssize_t page_size, top;
    int node_value;
    if (!PyArg_ParseTuple(args, "OnOOnp", &slots_obj, &page_size, &in_use_obj, &stack_obj, &top,
                          &node_value))
        return NULL;
    if (page_size < 1) return PyErr_Format(PyExc_ValueError, "page_size %zd < 1", page_size);
    Py_buffer slots, in_use, stack;
    if (PyObject_GetBuffer(slots_obj, &slots, PyBUF_STRIDES | PyBUF_FORMAT)) return NULL;
    if (PyObject_GetBuffer(in_use_obj, &in_use,
                           PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)) {
        PyBuffer_Release(&slots);
        return NULL;
    }
    if (PyObject_GetBuffer(stack_obj, &stack,
                           PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)) {
        PyBuffer_Release(&slots);
        PyBuffer_Release(&in_use);
        return NULL;
    }
    PyObject *result = NULL;
    int64_t *pages = NULL, *tmp = NULL;
    Py_ssize_t *bounds = NULL;
    Py_ssize_t num_stack = stack.len / 8, num_flags = in_use.len;
    const char *flag_format = in_use.format ? in_use.format : "B";
    if (!is_int64_vector(&slots) || !is_int64_vector(&stack) || in_use.itemsize != 1 ||
        strcmp(flag_format, "?") != 0) {
        PyErr_SetString(PyExc_ValueError,
                        "free_slots: slots and stack must be 1-D int64, in_use bool flags");
        goto done;
    }
    if (num_flags != num_stack + 1 || top < 0 || top > num_stack) {
        PyErr_Format(PyExc_ValueError,
                     "free_slots: %zd flags for a stack of %zd pages with %zd free", num_flags,
                     num_stack, top);
        goto done;
    }
    Py_ssize_t n = slots.shape[0];
    Py_ssize_t step = node_value ? page_size : 1;
    SlotPages s = {slots.buf, slots.strides[0] * step, n ? (n - 1) / step + 1 : 0, page_size,
                   shift_of(page_size)};
    uint8_t *flags = in_use.buf;
    int64_t *stack_pages = stack.buf;
    Py_ssize_t new_top;
    if (node_value) {
        new_top = free_node_value(&s, (int64_t)num_stack, flags, stack_pages, top);
        if (new_top != -2) result = PyLong_FromSsize_t(new_top);
        goto done;
    }
    Py_ssize_t m = check_ascending(&s, (int64_t)num_stack, flags);
    const int64_t *pushed = NULL; /* the distinct pages, ascending, once copied and sorted */
    if (m == -2) {
        Py_ssize_t size = s.count ? s.count : 1;
        pages = PyMem_Malloc((size_t)size * sizeof(int64_t));
        tmp = PyMem_Malloc((size_t)size * sizeof(int64_t));
        bounds = PyMem_Malloc((size_t)(size + 1) * sizeof(Py_ssize_t));
        if (!pages || !tmp || !bounds) {
            PyErr_NoMemory();
            goto done;
        }
        int64_t *sorted = pages;
        m = check_sorted_copy(&s, &sorted, tmp, bounds, (int64_t)num_stack, flags);
        pushed = sorted;
    }
    if (m < 0) {
        result = PyLong_FromLong(-1);
        goto done;
    }
    if (m > num_stack - top) { /* allocated pages beyond the free room: a broken state */
        PyErr_Format(PyExc_ValueError, "free_slots: %zd pages freed with room for %zd", m,
                     num_stack - top);
        goto done;
    }
    /* Pushed highest first, so the smallest page is on top (allocated next). */
    if (pushed) {
        for (Py_ssize_t i = 0; i < m; i++) {
            flags[pushed[i]] = 0;
            stack_pages[top + m - 1 - i] = pushed[i];
        }
    } else {
        int64_t prev = 0;
        for (Py_ssize_t i = 0, j = 0; i < s.count; i++) {
            int64_t p = page_at(&s, i);
            if (p == prev) continue;
            flags[p] = 0;
            stack_pages[top + m - 1 - j++] = p;
            prev = p;
        }
    }
    result = PyLong_FromSsize_t(top + m);
done:
    PyMem_Free(pages);
    PyMem_Free(tmp);
    PyMem_Free(bounds);
    PyBuffer_Release(&slots);
    PyBuffer_Release(&in_use);
    PyBuffer_Release(&stack);
    return result;
}

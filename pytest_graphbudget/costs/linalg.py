"""Dense linear algebra (``torch.linalg``): LAPACK's factorizations and solves.

Their counts are the textbook ones, multiplies plus adds, as LAPACK Working Note 41 and Golub
and Van Loan (Matrix Computations, 4th ed., table 8.6.1 and section 8.3) give them, for an
``m x n`` matrix (``n x n`` when square) and ``k`` right-hand sides, times the batch. They are
``other`` FLOPs, not MACs: ``flops_contraction`` stays what the products and convolutions do.
The lower-order terms (pivot searches, the eigenvalue iterations' ``O(n^2)`` per sweep) are
left out, as those references leave them.
"""

from __future__ import annotations

from math import prod

from pytest_graphbudget.costs.registry import OpCost, Shape, register


def _batch(a: Shape) -> int:
    return prod(a[:-2])


def _lu(a: Shape) -> float:
    """``getrf``: ``m n^2 - n^3 / 3`` for ``m >= n`` (``2 n^3 / 3`` square)."""
    m, n = max(a[-2:]), min(a[-2:])
    return m * n * n - n**3 / 3


def _cost(flops: float, a: Shape) -> OpCost:
    return OpCost(other=round(_batch(a) * flops))


@register("linalg_lu_factor_ex", "linalg_lu", role="anchor")
def lu(a: Shape, *_, out, **__) -> OpCost:
    return _cost(_lu(a), a)


@register("linalg_cholesky_ex", role="anchor")
def cholesky(a: Shape, *_, out, **__) -> OpCost:
    return _cost(a[-1] ** 3 / 3, a)  # potrf


@register("_linalg_solve_ex", role="anchor")
def solve(a: Shape, b: Shape, left: bool = True, *_, out, **__) -> OpCost:
    # the LU of A (getrf), then a forward and a back substitution per right-hand side (getrs)
    return _cost(_lu(a) + 2 * a[-1] ** 2 * _rhs(b, left), out[0])


def _rhs(b: Shape, left: bool) -> int:
    """The right-hand sides of ``B``: its columns (rows when solving from the right)."""
    return (b[-1] if left else b[-2]) if len(b) > 1 else 1


@register("linalg_lu_solve", role="anchor")
def lu_solve(factor: Shape, pivots: Shape, b: Shape, *_, out, left=True, **__) -> OpCost:
    return _cost(2 * factor[-1] ** 2 * _rhs(b, left), out)  # getrs: two triangular solves


@register("cholesky_solve", "_cholesky_solve_helper", role="anchor")
def cholesky_solve(b: Shape, factor: Shape, *_, out, **__) -> OpCost:
    return _cost(2 * factor[-1] ** 2 * _rhs(b, True), out)  # potrs: two triangular solves


@register("linalg_solve_triangular", role="anchor")
def triangular_solve(a: Shape, b: Shape, *_, out, left=True, **__) -> OpCost:
    return _cost(a[-1] ** 2 * _rhs(b, left), out)  # trsm: n^2 a right-hand side


@register("triangular_solve", role="anchor")
def legacy_triangular_solve(b: Shape, a: Shape, *_, out, **__) -> OpCost:
    return _cost(a[-1] ** 2 * _rhs(b, True), out[0])  # trsm, as ``linalg_solve_triangular``


@register("cholesky_inverse", role="anchor")
def cholesky_inverse(factor: Shape, *_, out, **__) -> OpCost:
    return _cost(2 * factor[-1] ** 3 / 3, factor)  # potri: trtri n^3/3 + lauum n^3/3


@register("linalg_inv_ex", role="anchor")
def inverse(a: Shape, *_, out, **__) -> OpCost:
    return _cost(2 * a[-1] ** 3, a)  # getrf 2n^3/3 + getri 4n^3/3


@register("_linalg_det", "_linalg_slogdet", role="anchor")
def determinant(a: Shape, *_, out, **__) -> OpCost:
    return _cost(_lu(a) + a[-1], a)  # the LU, then the product of its diagonal


@register("linalg_qr", role="anchor")
def qr(a: Shape, mode: str = "reduced", *_, out, **__) -> OpCost:
    # geqrf: 2 m n^2 - 2 n^3 / 3; forming Q (orgqr) as much again, unless mode="r"
    m, n = max(a[-2:]), min(a[-2:])
    r = 2 * m * n * n - 2 * n**3 / 3
    return _cost(r if mode == "r" else 2 * r, a)


@register("_linalg_svd", role="anchor")
def svd(a: Shape, *_, out, **__) -> OpCost:
    # Golub-Kahan-Reinsch: the singular values alone 4 m n^2 - 4 n^3 / 3; with V and a thin U
    # 14 m n^2 + 8 n^3; with the full U 4 m^2 n + 8 m n^2 + 9 n^3. What was computed is read
    # from the outputs (U is empty without ``compute_uv``; torch computes it whenever the input
    # may need a gradient).
    m, n = max(a[-2:]), min(a[-2:])
    u = out[0]
    if prod(u) == 0:
        return _cost(4 * m * n * n - 4 * n**3 / 3, a)
    full = u[-1] == u[-2] == m and m > n
    return _cost(4 * m * m * n + 8 * m * n * n + 9 * n**3 if full else 14 * m * n * n + 8 * n**3, a)


@register("_linalg_eigh", role="anchor")
def eigh(a: Shape, *_, out, **__) -> OpCost:
    # symmetric QR: the eigenvalues alone 4 n^3 / 3, with the eigenvectors 9 n^3 (read from the
    # outputs: the eigenvectors are empty without ``compute_v``)
    return _cost((9 if prod(out[1]) else 4 / 3) * a[-1] ** 3, a)


@register("linalg_eig", role="anchor")
def eig(a: Shape, *_, out, **__) -> OpCost:
    # geev: the Hessenberg reduction and the shifted QR iterations, with the eigenvectors
    # 25 n^3 (under a dispatch mode ``eigvals`` computes them too: this op is what it calls)
    return _cost(25 * a[-1] ** 3, a)


def _geqrf(a: Shape) -> float:
    m, n = max(a[-2:]), min(a[-2:])
    return 2 * m * n * n - 2 * n**3 / 3


@register("geqrf", role="anchor")
def householder_qr(a: Shape, *_, out, **__) -> OpCost:
    return _cost(_geqrf(a), a)


@register("linalg_householder_product", role="anchor")
def householder_product(a: Shape, tau: Shape, *_, out, **__) -> OpCost:
    # orgqr: an m x n Q from k reflectors, 4 m n k - 2 (m + n) k^2 + 4 k^3 / 3
    (m, n), k = a[-2:], tau[-1]
    return _cost(4 * m * n * k - 2 * (m + n) * k * k + 4 * k**3 / 3, a)


@register("ormqr", role="anchor")
def householder_apply(a: Shape, tau: Shape, c: Shape, left=True, *_, out, **__) -> OpCost:
    # ormqr: k reflectors applied to an m x n C, 4 m n k - 2 n k^2 from the left (- 2 m k^2 right)
    (m, n), k = c[-2:], tau[-1]
    return _cost(4 * m * n * k - 2 * (n if left else m) * k * k, c)


@register("linalg_ldl_factor_ex", role="anchor")
def ldl_factor(a: Shape, *_, out, **__) -> OpCost:
    return _cost(a[-1] ** 3 / 3, a)  # sytrf, Bunch-Kaufman: as a Cholesky


@register("linalg_ldl_solve", role="anchor")
def ldl_solve(factor: Shape, pivots: Shape, b: Shape, *_, out, **__) -> OpCost:
    return _cost(2 * factor[-1] ** 2 * _rhs(b, True), out)  # sytrs: two triangular solves


@register("linalg_pinv", role="anchor")
def pseudo_inverse(a: Shape, *_, out, hermitian: bool = False, **__) -> OpCost:
    # the SVD (V and a thin U) or, hermitian, the eigendecomposition; then V diag(1/s) U^H
    m, n = max(a[-2:]), min(a[-2:])
    factor = 9 * n**3 if hermitian else 14 * m * n * n + 8 * n**3
    return _cost(factor + 2 * m * n * n + n * n, a)


@register("linalg_lstsq", role="anchor")
def least_squares(a: Shape, b: Shape, *_, out, driver: str | None = None, **__) -> OpCost:
    # gels and gelsy (CPU's default): a Householder QR, Q^T B (4 m n k - 2 n^2 k) and the
    # triangular solve (n^2 k); gelsd and gelss: the R-SVD route, 4 m n^2 + 8 n^3, then the
    # product with B's k columns (2 m n k + 2 n^2 k, leading terms)
    m, n = max(a[-2:]), min(a[-2:])
    k = _rhs(b, True) if len(b) == len(a) else 1
    if driver in ("gelsd", "gelss"):
        return _cost(4 * m * n * n + 8 * n**3 + 2 * m * n * k + 2 * n * n * k, a)
    return _cost(_geqrf(a) + 4 * m * n * k - 2 * n * n * k + n * n * k, a)

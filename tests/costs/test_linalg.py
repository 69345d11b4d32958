"""``torch.linalg``'s factorizations and solves, counted by hand from the textbook counts
(LAPACK Working Note 41; Golub and Van Loan) that docs/metrics.md gives: multiplies plus adds,
``other`` FLOPs, never MACs. A batch of 2 matrices of 8 x 8 (12 x 8 where rectangular), 3
right-hand sides."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_graphbudget import profile_model  # noqa: E402

N, K, M = 8, 3, 12
LU = N * N * N - N**3 / 3  # getrf of a square matrix: 2 n^3 / 3 = 341.33


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, a, b):
        return self.fn(a, b)


def spd() -> torch.Tensor:
    torch.manual_seed(0)
    a = torch.randn(2, N, N)
    return a @ a.transpose(-1, -2) + N * torch.eye(N)


CHOLESKY = N**3 / 3
CASES = {
    "solve": (lambda a, b: torch.linalg.solve(a, b), LU + 2 * N * N * K),
    "inv": (lambda a, b: torch.linalg.inv(a), 2 * N**3),
    "cholesky": (lambda a, b: torch.linalg.cholesky(a), CHOLESKY),
    "cholesky_solve": (
        lambda a, b: torch.cholesky_solve(b, torch.linalg.cholesky(a)),
        CHOLESKY + 2 * N * N * K,
    ),
    "solve_triangular": (
        lambda a, b: torch.linalg.solve_triangular(torch.linalg.cholesky(a), b, upper=False),
        CHOLESKY + N * N * K,
    ),
    "lu_solve": (
        lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b),
        LU + 2 * N * N * K,
    ),
    "det": (lambda a, b: torch.linalg.det(a), LU + N),  # the LU, then its diagonal's product
    "eigh": (lambda a, b: torch.linalg.eigh(a)[1], 9 * N**3),
    "qr": (lambda a, b: torch.linalg.qr(a)[0], 2 * (2 * N**3 - 2 * N**3 / 3)),  # geqrf + orgqr
    "qr_r": (lambda a, b: torch.linalg.qr(a, mode="r")[1], 2 * N**3 - 2 * N**3 / 3),
    "eig": (lambda a, b: torch.linalg.eig(a)[1].real, 25 * N**3),  # geev, the vectors too
    # under the profile's dispatch mode eigvals computes the eigenvectors (``linalg_eig``)
    "eigvals": (lambda a, b: torch.linalg.eigvals(a).real, 25 * N**3),
    "ldl_solve": (
        lambda a, b: torch.linalg.ldl_solve(*torch.linalg.ldl_factor(a), b),
        N**3 / 3 + 2 * N * N * K,  # sytrf, then sytrs
    ),
    "pinv_hermitian": (  # eigh, then V diag(1/s) V^H
        lambda a, b: torch.linalg.pinv(a, hermitian=True),
        9 * N**3 + 2 * N**3 + N * N,
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_square_factorizations_and_solves_match_the_textbook_counts(name):
    fn, flops = CASES[name]
    prof = profile_model(Fn(fn), (spd(), torch.randn(2, N, K)))
    assert prof.coverage.unsupported_ops == {}
    assert prof.macs == 0
    assert prof.flops == round(2 * flops)


@pytest.mark.parametrize(
    ("full", "flops"),
    [
        (False, 14 * M * N * N + 8 * N**3),  # Golub-Kahan-Reinsch, V and a thin U: 14,848
        (True, 4 * M * M * N + 8 * M * N * N + 9 * N**3),  # the full U: 15,360
    ],
)
def test_a_rectangular_svd_counts_the_u_it_returns(full, flops):
    a = torch.randn(2, M, N)
    prof = profile_model(Fn(lambda a, b: torch.linalg.svd(a, full_matrices=full)[0]), (a, a))
    assert (prof.flops, prof.coverage.unsupported_ops) == (2 * flops, {})


QR = 2 * M * N * N - 2 * N**3 / 3  # geqrf of a 12 x 8 matrix: 1,194.67
RECTANGULAR = {
    "geqrf": (lambda a, b: torch.geqrf(a)[0], QR),
    "householder_product": (  # orgqr, 8 reflectors: 4 m n k - 2 (m + n) k^2 + 4 k^3 / 3
        lambda a, b: torch.linalg.householder_product(*torch.geqrf(a)),
        QR + 4 * M * N * N - 2 * (M + N) * N * N + 4 * N**3 / 3,
    ),
    "ormqr_left": (  # Q^T B, B 12 x 3: 4 m k n - 2 k n^2 with k = 3 columns, n = 8 reflectors
        lambda a, b: torch.ormqr(*torch.geqrf(a), b, transpose=True),
        QR + 4 * M * K * N - 2 * K * N * N,
    ),
    "ormqr_right": (  # B^T Q, B^T 3 x 12: its 3 rows this time
        lambda a, b: torch.ormqr(*torch.geqrf(a), b.mT, left=False),
        QR + 4 * K * M * N - 2 * K * N * N,
    ),
    "pinv": (  # the thin SVD, then V diag(1/s) U^H: 14,848 + 1,536 + 64
        lambda a, b: torch.linalg.pinv(a),
        14 * M * N * N + 8 * N**3 + 2 * M * N * N + N * N,
    ),
    "lstsq_gelsy": (  # Householder QR, Q^T B, then R's back substitution
        lambda a, b: torch.linalg.lstsq(a, b).solution,
        QR + 4 * M * N * K - 2 * N * N * K + N * N * K,
    ),
    "lstsq_one_column": (
        lambda a, b: torch.linalg.lstsq(a, b[..., 0]).solution,
        QR + 4 * M * N - 2 * N * N + N * N,
    ),
    "lstsq_gelsd": (  # the SVD route (Golub and Van Loan table 5.5.1), then its products with B
        lambda a, b: torch.linalg.lstsq(a, b, driver="gelsd").solution,
        4 * M * N * N + 8 * N**3 + 2 * M * N * K + 2 * N * N * K,
    ),
}


@pytest.mark.parametrize("name", RECTANGULAR)
def test_rectangular_factorizations_and_solves_match_the_textbook_counts(name):
    fn, flops = RECTANGULAR[name]
    torch.manual_seed(0)
    prof = profile_model(Fn(fn), (torch.randn(2, M, N), torch.randn(2, M, K)))
    assert prof.coverage.unsupported_ops == {}
    assert prof.macs == 0
    # each op's count is rounded to a whole FLOP per batch before they are added
    assert abs(prof.flops - 2 * flops) <= 1, (prof.flops, 2 * flops)

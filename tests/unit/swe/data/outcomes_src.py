import pytest


def test_passes():
    assert True


def test_fails():
    assert 1 + 1 == 3, "arithmetic - it is broken"


@pytest.fixture
def broken():
    raise RuntimeError("fixture exploded")


def test_setup_error(broken):
    pass


@pytest.mark.skip(reason="not on this platform")
def test_skipped():
    pass


@pytest.mark.xfail(reason="known bug")
def test_xfail():
    assert False  # noqa: B011  (the point of the xfail)


@pytest.mark.xfail(reason="fixed upstream")
def test_xpass():
    assert True


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("Hello World", "hello-world"),
        ("[draft] notes", "draft-notes"),
        ("Crème brûlée", "creme-brulee"),
        ("a - b", "a-b"),
        ("", ""),
    ],
)
def test_params(title, expected):
    assert expected != "a-b"


class TestGroup:
    def test_method(self):
        print("PASSED something that is not a test")

    @pytest.mark.parametrize("n", [1, 2])
    def test_param_method(self, n):
        assert n == 1


def test_prints_status_words():
    print("FAILED looks like a summary line")

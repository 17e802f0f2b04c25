import pytest
from csvsift import mean, median


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_median_odd_length():
    assert median([5, 1, 3]) == 3


def test_median_single_value():
    assert median([4.5]) == 4.5


@pytest.mark.parametrize("function", [mean, median])
def test_empty_data_rejected(function):
    with pytest.raises(ValueError):
        function([])

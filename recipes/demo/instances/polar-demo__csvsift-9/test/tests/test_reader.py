from csvsift import read_records


def write(tmp_path, text, encoding="utf-8"):
    path = tmp_path / "data.csv"
    path.write_bytes(text.encode(encoding))
    return path


def test_reads_rows_as_dicts(tmp_path):
    path = write(tmp_path, "id,name\n1,Ada\n2,Grace\n")
    assert read_records(path) == [{"id": "1", "name": "Ada"}, {"id": "2", "name": "Grace"}]


def test_header_whitespace_stripped(tmp_path):
    path = write(tmp_path, " id , name \n1,Ada\n")
    assert list(read_records(path)[0]) == ["id", "name"]


def test_semicolon_delimiter(tmp_path):
    path = write(tmp_path, "id;city\n7;Z\u00fcrich\n")
    assert read_records(path, delimiter=";") == [{"id": "7", "city": "Z\u00fcrich"}]


def test_empty_file(tmp_path):
    assert read_records(write(tmp_path, "")) == []


def test_utf8_bom_is_not_part_of_the_header(tmp_path):
    path = write(tmp_path, "\ufeffid,name\n1,Ada\n")
    assert read_records(path) == [{"id": "1", "name": "Ada"}]


def test_explicit_latin1(tmp_path):
    path = write(tmp_path, "id,city\n7,Z\u00fcrich\n", encoding="latin-1")
    assert read_records(path, encoding="latin-1") == [{"id": "7", "city": "Z\u00fcrich"}]

"""Numbers the learner's language's way (``core.language``: ``tr``'s numeric fields and ``number``): pt-BR
writes ``28.996``, ``0,016``, ``12,5%``; English stays exactly ``str.format`` for every message of the catalogs
that carries a format spec. Fast tier: nothing here starts a process."""

import string

import pytest

from effitrain_helpers.core.language import catalog, number, number_list, separators, tr

LANG = "pt-BR"


def _sample_fields(template: str) -> dict | None:
    """Values for the fields of ``template``, a number where the spec takes one (an int first: ``,d`` refuses a
    float); None for a text that is not a template of named fields (code shown as it is, braces and all)."""
    try:
        parsed = [(name, spec) for _, name, spec, _ in string.Formatter().parse(template) if name is not None]
    except ValueError:
        return None
    fields = {}
    for name, spec in parsed:
        if not name.isidentifier() or "{" in (spec or ""):
            return None
        fits = [v for v in (1234567, 1234.5678, "word") if _formats(v, spec or "")]
        if not fits:
            return None
        fields[name] = fits[0]
    return fields


def _formats(value, spec: str) -> bool:
    try:
        format(value, spec)
    except (ValueError, TypeError):
        return False
    return True


def _templates_with_specs() -> list[tuple[str, dict]]:
    """The catalog's English templates whose fields carry a format spec, with sample values."""
    found = []
    for en in catalog(LANG):
        fields = _sample_fields(en)
        if fields and any(spec for _, name, spec, _ in string.Formatter().parse(en) if name):
            found.append((en, fields))
    return found


def test_portuguese_numbers_use_the_locales_separators():
    assert separators(LANG) == (",", ".")
    assert tr("{n:,} tokens", lang=LANG, n=28996) == "28.996 tokens"
    assert tr("{x:.3f} s", lang=LANG, x=0.0164) == "0,016 s"
    assert tr("{p:.1%}", lang=LANG, p=0.125) == "12,5%"
    assert tr("{n:>10,}|", lang=LANG, n=1234567) == " 1.234.567|"  # width and alignment kept


def test_english_numbers_are_exactly_str_format():
    assert tr("{n:,} tokens, {x:.3f} s, {p:.1%}", lang="en", n=28996, x=0.0164, p=0.125) == \
        "28,996 tokens, 0.016 s, 12.5%"


def test_what_is_not_a_number_is_left_as_it_is():
    assert tr("{b} {s} {n}", lang=LANG, b=True, s="v1.2,3", n=7) == "True v1.2,3 7"
    assert number("1,000.5", "", LANG) == "1,000.5"


def test_number_is_the_same_formatting_outside_a_message():
    assert number(28996, ",", LANG) == tr("{n:,}", lang=LANG, n=28996) == "28.996"
    assert number(28996, ",", "en") == "28,996"
    assert number(0.5, ".2f", "xx-Nowhere") == "0.50"  # a language Babel does not know: English separators


def test_a_list_of_numbers_is_joined_where_its_decimal_comma_cannot_be_misread():
    assert number_list([0.5, 1.25, 2], ".2f", LANG) == "0,50; 1,25; 2,00"  # not "0,50, 1,25": five numbers?
    assert number_list([0.533, 0.326], ".3f", "en") == "0.533, 0.326"
    assert number_list([65600, 65539], ",", LANG) == "65.600; 65.539" and number_list([], ".1f", LANG) == ""


def test_every_catalog_message_with_a_format_spec_is_byte_identical_in_english_and_formats_in_portuguese():
    templates = _templates_with_specs()
    assert len(templates) > 10, "the catalogs have messages with format specs (e.g. '{n:,}')"
    for en, fields in templates:
        assert tr(en, lang="en", **fields) == en.format(**fields), en
        portuguese = tr(en, lang=LANG, **fields)
        assert "1,234,567" not in portuguese and "1234.57" not in portuguese, \
            f"an English number left in the Portuguese of {en!r}: {portuguese}"


@pytest.mark.parametrize("spec, value, expected", [(",", 28996, "28.996"), (".3f", 0.0164, "0,016"),
                                                   (".1%", 0.125, "12,5%"), (".2e", 0.00012, "1,20e-04"),
                                                   ("", 2.5, "2,5"), ("d", 42, "42")])
def test_python_specs_map_to_portuguese(spec, value, expected):
    assert number(value, spec, LANG) == expected


def test_a_styled_table_is_drawn_as_a_dataframe():
    """JupyterLab draws it as it draws a DataFrame (numbers right-aligned), and the browser tests treat it so."""
    import pandas as pd

    from effitrain_helpers.core.language import styled

    html = styled(pd.DataFrame({"ms": [1.5, 2.0]})).to_html()
    table = html[html.index("<table"):].split(">", 1)[0]
    assert 'class="dataframe"' in table, table

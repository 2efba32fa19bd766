import bpe_openai

from core.lib import tokens
from core.lib.tokens import BpeTokenCounter, count_message_tokens, count_tokens


def _encoded(text: str, encoding: str = "cl100k_base") -> int:
    return len(bpe_openai.get_encoding(encoding).encode(text, disallowed_special=()))


def test_counts_match_the_encoding():
    """Short, long and special-token texts count as the bundled encoding encodes them."""
    for text in ("hello world", "- lisbon_flight: window seat 42", "x " * 3000, "say <|endoftext|> now"):
        assert count_tokens(text) == _encoded(text)
    assert count_tokens("") == 0


def test_the_model_picks_its_encoding():
    """A model name selects its own encoding; the memo keeps the encodings apart."""
    text = "Réservez une fenêtre côté couloir, s'il vous plaît — 你好"
    assert BpeTokenCounter().count(text) == _encoded(text, "cl100k_base")
    assert BpeTokenCounter().count(text, model="gpt-4o") == _encoded(text, "o200k_base")


def test_short_texts_are_counted_once():
    """A line counted again (the same fact every turn) is not encoded again."""
    text = "- memo-test-line: a value seen on every turn"
    count_tokens(text)
    hits = tokens._bpe_count_memo.cache_info().hits
    assert count_tokens(text) == _encoded(text)
    assert tokens._bpe_count_memo.cache_info().hits == hits + 1


def test_long_texts_use_the_small_block_memo():
    """Texts past MEMO_MAX_CHARS (whole blocks) go to the small block memo, not the line memo."""
    text = "a long block " * (tokens.MEMO_MAX_CHARS // 10)
    lines = tokens._bpe_count_memo.cache_info().currsize
    assert count_tokens(text) == _encoded(text)
    hits = tokens._bpe_count_block_memo.cache_info().hits
    assert count_tokens(text) == _encoded(text)
    assert tokens._bpe_count_block_memo.cache_info().hits == hits + 1
    assert tokens._bpe_count_memo.cache_info().currsize == lines


def test_huge_texts_are_not_remembered():
    """Past BLOCK_MEMO_MAX_CHARS nothing is kept."""
    text = "huge " * (tokens.BLOCK_MEMO_MAX_CHARS // 4)
    blocks = tokens._bpe_count_block_memo.cache_info().currsize
    assert count_tokens(text) == _encoded(text)
    assert tokens._bpe_count_block_memo.cache_info().currsize == blocks


def test_message_tokens_add_overhead_and_tool_calls():
    """A chat message costs its content, its tool calls and the per-message overhead."""
    plain = count_message_tokens(content="hi there")
    assert plain == _encoded("hi there") + tokens.MESSAGE_OVERHEAD_TOKENS
    calls = [{"name": "search", "arguments": {"q": 1}}]
    with_call = count_message_tokens(content="hi there", tool_calls=calls)
    assert with_call == plain + _encoded("search") + _encoded('{"q": 1}') + tokens.MESSAGE_OVERHEAD_TOKENS

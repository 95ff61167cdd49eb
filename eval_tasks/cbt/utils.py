"""Document functions of the CBT tasks (see _cbt_template_yaml).

A CBT document (HF `cam-cst/cbt`, configs CN and NE) has `sentences` (the 20 sentences of the
story), `question` (the 21st sentence with the answer replaced by XXXXX), `options` (10
candidate words) and `answer` (one of the options).
"""
import re

BLANK = "XXXXX"


def detokenize(text: str) -> str:
    """Undo the PTB-style tokenization of the CBT text ("`` Hi , '' said Tom 's dog .").

    GPT-2 was trained on raw web text and never saw spaces before punctuation or split
    contractions; the GPT-2 paper evaluated through de-tokenizers for this reason. Only the
    frequent, unambiguous artifacts are undone; the words themselves are never touched."""
    text = text.replace("`` ", '"').replace(" ''", '"').replace("``", '"').replace("''", '"')
    text = re.sub(r" ([.,;:!?)\]}])", r"\1", text)  # no space before closing punctuation
    text = re.sub(r"([(\[{]) ", r"\1", text)  # nor after opening brackets
    text = re.sub(r" (n't|'s|'re|'ve|'ll|'d|'m)\b", r"\1", text, flags=re.IGNORECASE)  # do n't -> don't
    return text


def doc_to_text(doc) -> str:
    """The context: the story's 20 sentences as one paragraph."""
    return detokenize(" ".join(s.strip() for s in doc["sentences"]))


def doc_to_choice(doc) -> list:
    """The 10 candidates, each as the whole 21st sentence with the candidate in the blank."""
    question = doc["question"].strip()
    return [detokenize(question.replace(BLANK, option)) for option in doc["options"]]


def doc_to_target(doc) -> int:
    return list(doc["options"]).index(doc["answer"])

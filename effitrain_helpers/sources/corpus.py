"""The workbook's own English text: sentences about people, machines and training.

Used to train the WordPiece vocabulary of the offline DistilBERT checkpoint (``models``), so the
tokenizer knows the words the lessons' own data uses. Deterministic: the same seed gives the
same sentences on every machine.
"""

from __future__ import annotations

import random

from effitrain_helpers.core.language import msg
from effitrain_helpers.core.validate import positive_int

SUBJECTS = [
    "The engineer", "A student", "The instructor", "Our team", "The researcher", "A data scientist",
    "The company", "The new model", "The training job", "The cluster", "A small laptop", "The GPU",
    "The Central Bank", "The city council", "Microsoft", "The hospital", "The startup", "Maria",
    "Joao", "Dennis", "The reviewer", "The committee", "The server", "Each process",
]
# Verbs of the sentences (past tense = past participle) and the synonym a paraphrase may use instead.
SYNONYMS = {
    "trained": "taught", "evaluated": "assessed", "released": "published", "measured": "quantified",
    "reported": "announced", "shared": "distributed", "tested": "checked", "compared": "contrasted",
    "updated": "revised", "loaded": "opened", "approved": "accepted", "rejected": "refused",
    "rebuilt": "reconstructed", "optimised": "tuned", "prepared": "readied", "launched": "started",
    "profiled": "analysed", "described": "explained", "repaired": "fixed", "sold": "traded",
}
VERBS = list(SYNONYMS) + list(SYNONYMS.values())
OBJECTS = [
    "the language model", "a new dataset", "the benchmark results", "the quarterly report",
    "the gradient checkpoints", "eight GPUs", "the loss curve", "the optimizer states",
    "the matrix multiplication kernel", "the sentence pairs", "the budget", "the audio samples",
    "the image processor", "the tokenizer", "a faster data loader", "the mixed precision recipe",
    "the learning rate schedule", "the evaluation metrics", "the final weights", "the contract",
]
TAILS = [
    "on Monday", "last week", "before the deadline", "in two hours", "with a single command",
    "for the whole class", "after a long review", "without any network", "on every device",
    "in half the memory", "at twice the speed", "despite the outage", "during the workshop",
    "for 3.5 million dollars", "in 2024", "by 12 percent", "across four machines", "",
]


# Hand-written news-style sentences, so the vocabulary also covers everyday English
# (numbers, names, money, politics, business), the register of paraphrase data such as GLUE MRPC.
NEWS = [
    "Shares of the chip maker rose 4.2 percent in early trading on Tuesday.",
    "The senator said the bill would not pass without changes to the tax section.",
    "Officials confirmed that two people were injured when the bridge collapsed.",
    "The court ruled that the company had violated its agreement with suppliers.",
    "Analysts expect quarterly profit to fall because of weaker demand in Europe.",
    "The airline cancelled hundreds of flights after a storm hit the eastern coast.",
    "Police arrested a man who allegedly stole equipment from the university laboratory.",
    "The minister announced a plan to build new schools in rural districts.",
    "Revenue climbed to $2.3 billion, beating the forecasts of most economists.",
    "The two companies agreed to merge in a deal valued at about 900 million euros.",
    "Doctors warned that the virus could spread faster during the winter months.",
    "The mayor denied reports that the city would raise water prices next year.",
    "Scientists published a study showing that the glacier is melting more quickly.",
    "The union said its members would strike unless wages were increased.",
    "Investors sold government bonds after the central bank surprised the market.",
    "The software update fixed a security flaw that attackers had exploited.",
    "Her lawyer argued that the evidence had been collected without a warrant.",
    "The team won the championship for the third time in five seasons.",
    "Prices of crude oil dropped sharply when production figures were released.",
    "The president will travel to Brazil and Argentina later this month.",
    "A spokesman for the hospital declined to comment on the patient's condition.",
    "The museum reopened after a renovation that lasted nearly two years.",
    "Unemployment fell to its lowest level since the early nineties.",
    "The board rejected the offer, saying it undervalued the business.",
    "Witnesses told reporters that the fire started shortly after midnight.",
    "Engineers replaced the damaged cables and restored power to most homes.",
    "The agency fined the bank for failing to report suspicious transactions.",
    "Critics said the new rules would hurt small farmers more than large ones.",
    "The author's latest novel sold more than a million copies in its first week.",
    "Talks between the two governments ended without an agreement on Friday.",
    "The retailer plans to close 40 stores and cut about 1,200 jobs.",
    "Researchers trained the network on millions of labelled photographs.",
    "The judge sentenced him to six years in prison for fraud.",
    "Customers complained that the service had been slow and unreliable.",
    "The province received heavy rain, and several roads were closed by floods.",
    "Earnings per share were 57 cents, compared with 41 cents a year earlier.",
    "He resigned from the committee, citing personal reasons.",
    "The telescope captured images of a distant galaxy for the first time.",
    "Voters in the northern region approved the measure by a wide margin.",
    "The factory will double its output of batteries by the end of 2027.",
]


def lower_first(phrase: str) -> str:
    """``phrase`` as it reads inside a sentence ('The engineer' -> 'the engineer'; names keep their capital)."""
    return phrase if phrase.split()[0] in {"Microsoft", "Maria", "Joao", "Dennis"} else phrase[0].lower() + phrase[1:]


def clause(subject: str, verb: str, obj: str, passive: bool) -> str:
    """'S verb O', or in the passive voice 'O was/were verb by S'."""
    if passive:
        be = "were" if obj.split()[-1].endswith("s") else "was"
        return f"{obj[0].upper() + obj[1:]} {be} {verb} by {lower_first(subject)}"
    return f"{subject} {verb} {obj}"


def sentence(rng: random.Random) -> str:
    """One sentence built from the workbook's word lists, active or passive."""
    tail = rng.choice(TAILS)
    text = clause(rng.choice(SUBJECTS), rng.choice(VERBS), rng.choice(OBJECTS), passive=rng.random() < 0.3)
    return text + (f" {tail}" if tail else "") + "."


def corpus_sentences(n: int = 4000, seed: int = 0) -> list[str]:
    """``n`` deterministic template sentences followed by the news-style ones: the tokenizer's training text."""
    positive_int("n", n, hint=msg("ask for at least 1 sentence, e.g. n=4000"))
    rng = random.Random(seed)
    return [sentence(rng) for _ in range(n)] + NEWS

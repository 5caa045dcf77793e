"""Test sentences in several languages: a few real ones per language, and as many more as asked
for, drawn deterministically from their words (the answers are checked against py3langid's own,
so the sentences need to look like their languages, not to be good prose)."""

from __future__ import annotations

import random

SEEDS = {
    "en": ["The weather is lovely today and we are going to the park.",
           "Please send me the report before the meeting on Monday.",
           "She has been reading the same book for three weeks."],
    "fr": ["Bonjour tout le monde, comment allez-vous aujourd'hui ?",
           "Nous avons mangé une excellente soupe à l'oignon hier soir.",
           "Il faut absolument que tu viennes voir ce film avec moi."],
    "de": ["Der schnelle braune Fuchs springt über den faulen Hund.",
           "Ich habe heute keine Zeit, weil ich arbeiten muss.",
           "Können Sie mir bitte sagen, wo der Bahnhof ist?"],
    "es": ["¿Dónde está la biblioteca? Necesito estudiar para el examen.",
           "Mi hermana vive en Madrid desde hace cinco años.",
           "El restaurante de la esquina tiene la mejor paella de la ciudad."],
    "it": ["Ciao, come stai? Oggi fa molto caldo in città.",
           "Abbiamo visitato il museo e poi siamo andati a cena.",
           "Non vedo l'ora di tornare in Italia la prossima estate."],
    "pt": ["Eu gosto muito de caminhar na praia ao pôr do sol.",
           "O nosso voo foi cancelado por causa da tempestade.",
           "Você pode me ajudar a carregar estas caixas?"],
    "nl": ["Het regent al de hele dag en ik blijf lekker binnen.",
           "Wij gaan morgen met de fiets naar het strand.",
           "Kun je mij vertellen hoe laat de winkel opengaat?"],
    "ru": ["Привет, как дела? Сегодня очень холодно на улице.",
           "Мы долго гуляли по парку и разговаривали о жизни.",
           "Пожалуйста, закройте окно, потому что идёт дождь."],
    "pl": ["Dzień dobry, chciałbym zamówić stolik na dwie osoby.",
           "W weekend pojechaliśmy w góry i było wspaniale.",
           "Czy możesz mi powiedzieć, która jest godzina?"],
    "tr": ["Bugün hava çok güzel, parka yürüyüşe gidelim mi?",
           "Kardeşim üniversitede mühendislik okuyor.",
           "Akşam yemeğinde ne yemek istersin?"],
    "zh": ["今天天气很好，我们一起去公园散步吧。",
           "我正在学习中文，虽然很难但是很有意思。",
           "请问火车站怎么走？"],
    "ja": ["今日はとても良い天気ですね。散歩に行きましょう。",
           "私は毎朝コーヒーを飲みながら新聞を読みます。",
           "駅までの道を教えていただけますか。"],
}


def sentences(count: int, seed: int = 25) -> list[str]:
    """`count` sentences: the seeds first, then new ones of 3 to 14 words (or characters, for
    languages written without spaces) from one language's seeds each."""
    out = [s for group in SEEDS.values() for s in group]
    rng = random.Random(seed)
    languages = sorted(SEEDS)
    while len(out) < count:
        language = rng.choice(languages)
        text = " ".join(SEEDS[language])
        if language in ("zh", "ja"):
            chars = [c for c in text if not c.isspace()]
            out.append("".join(rng.choice(chars) for _ in range(rng.randint(4, 30))))
        else:
            words = text.split()
            out.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 14))))
    return out[:count]

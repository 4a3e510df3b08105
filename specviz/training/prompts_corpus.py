"""Instruction prompts for distillation: templated requests of the kind people type, which the target
answers for its drafters (sequence-level distillation). Seeded, so a rerun rebuilds the same set. None
of the app's example prompts is in here verbatim, so measured acceptance on them is not a memorised answer.
"""

from __future__ import annotations

import random

COUNTRIES = """France Germany Italy Spain Portugal Ireland Wales Norway Sweden Finland Denmark Poland Austria
Switzerland Belgium Greece Turkey Egypt Kenya Nigeria Ghana Morocco Ethiopia Brazil Argentina Chile Peru Colombia
Mexico Canada Japan China India Pakistan Vietnam Thailand Indonesia Australia Iceland Hungary Romania Ukraine
Netherlands Czechia Croatia Serbia Cuba Jamaica Nepal Mongolia Iran Iraq Israel Jordan Saudi_Arabia Bangladesh
New_Zealand South_Africa South_Korea""".split()
CITIES = """Paris London Rome Tokyo Cairo Sydney Toronto Berlin Madrid Lisbon Dublin Oslo Athens Istanbul Nairobi
Lagos Mumbai Delhi Beijing Shanghai Seoul Bangkok Hanoi Lima Bogota Chicago Boston Seattle Vienna Prague Budapest
Warsaw Amsterdam Brussels Geneva Venice Florence Barcelona Glasgow Cardiff""".split()
ANIMALS = """elephants dolphins octopuses owls honeybees wolves penguins tigers whales bats ants crows horses
cats dogs sharks turtles frogs eagles camels giraffes kangaroos koalas parrots salmon butterflies spiders
snakes foxes rabbits""".split()
CONCEPTS = """photosynthesis gravity evolution democracy inflation electricity magnetism the_water_cycle
climate_change the_immune_system vaccines black_holes plate_tectonics the_internet machine_learning
blockchain recycling compound_interest supply_and_demand the_French_Revolution the_Renaissance
the_Industrial_Revolution the_Roman_Empire the_printing_press quantum_mechanics relativity DNA
the_solar_system volcanoes earthquakes the_greenhouse_effect renewable_energy nuclear_power batteries
antibiotics sleep meditation nutrition exercise the_stock_market taxes free_speech
the_scientific_method probability statistics algorithms recursion encryption operating_systems
databases compilers neural_networks the_moon tides rainbows clouds hurricanes""".split()
CATEGORIES = """fruits vegetables planets musical_instruments programming_languages board_games sports
countries_in_Europe rivers_in_Africa famous_painters famous_scientists renewable_energy_sources
kitchen_tools healthy_breakfasts hobbies_for_beginners ways_to_save_money tips_for_better_sleep
reasons_to_learn_a_language uses_of_vinegar things_to_pack_for_a_trip careers_in_science
book_genres types_of_clouds bird_species dog_breeds herbs spices""".split()
TASKS = """bake_bread learn_a_new_language start_running plant_a_tree write_a_cover_letter make_a_budget
prepare_for_an_interview brew_coffee change_a_tyre care_for_a_houseplant improve_my_handwriting
study_for_an_exam make_friends_in_a_new_city reduce_stress cook_rice organise_my_desk
learn_to_play_the_guitar write_a_good_email stay_focused_while_working start_a_vegetable_garden
train_a_puppy fix_a_leaking_tap make_pancakes give_a_good_presentation read_more_books""".split()
SENTENCES = """the meeting has been moved to Thursday because the manager is travelling
our team finished the project two weeks before the deadline
the weather was so cold that the lake froze overnight
she opened a small bakery in the centre of the town last spring
the new library will have a cafe, a garden and a room for children
he forgot his umbrella and got completely soaked on the way home
the museum is closed on Mondays but open late on Fridays
many people prefer to work from home at least two days a week
the train was delayed by an hour because of a signal failure
the students planted fifty trees around the school field
the company plans to hire twenty engineers next year
I think we should leave early to avoid the traffic
the concert was cancelled because the singer was ill
the recipe needs two eggs, a cup of flour and some milk
the river flooded the fields after a week of heavy rain""".splitlines()
STYLES = ["more formally", "in simpler words", "in the past tense", "as a question", "more politely", "in fewer words",
          "for a ten-year-old", "in a cheerful tone"]
CODE_TASKS = """reverses_a_string checks_whether_a_number_is_prime counts_the_words_in_a_sentence
returns_the_largest_item_in_a_list computes_the_factorial_of_a_number removes_duplicates_from_a_list
merges_two_sorted_lists checks_whether_a_string_is_a_palindrome converts_celsius_to_fahrenheit
reads_a_file_and_prints_each_line sums_the_even_numbers_in_a_list finds_the_average_of_a_list
sorts_a_list_of_dictionaries_by_a_key flattens_a_nested_list counts_the_vowels_in_a_string
returns_the_fibonacci_numbers_below_n checks_whether_two_words_are_anagrams
capitalises_the_first_letter_of_every_word computes_the_greatest_common_divisor
parses_a_date_string""".split()
BUILTINS = "len zip enumerate map filter sorted range open print isinstance dict.get str.join list.append".split()
PAIRS = [
    ("a list", "a tuple"), ("weather", "climate"), ("a virus", "a bacterium"), ("speed", "velocity"),
    ("a crocodile", "an alligator"), ("a lake", "a sea"), ("affect", "effect"), ("RAM", "storage"),
    ("a simile", "a metaphor"), ("an atom", "a molecule"), ("HTTP", "HTTPS"), ("a stack", "a queue"),
]
COMPLETIONS = """Once upon a time, in a small village by the sea,
The most important thing I learned at school was
In the morning, the market square was
The history of {concept} begins
My favourite place in {city} is
A good friend is someone who
The best way to understand {concept} is to
Scientists have discovered that {animal}
Dear Sam, thank you for your letter. I
The recipe is simple: first,
When the storm finally passed, the people of {city}
Here is a short guide to {concept}.""".splitlines()
TEMPLATES = """What is the capital of {country}?
Tell me about {city}.
What is {city} famous for?
Give me three interesting facts about {animal}.
Where do {animal} live and what do they eat?
What is {concept}?
Explain {concept} in simple terms.
Why is {concept} important?
Write a short paragraph about {concept}.
List five {category}.
Name some {category} and say one thing about each.
How do I {task}?
Give me a step-by-step plan to {task}.
What are some tips to {task}?
Rewrite this sentence {style}: {sentence}.
Make this sentence sound {style2}: {sentence}.
Write a Python function that {code_task}.
How would you write a function in Python that {code_task}?
What does the Python function {builtin} do? Give an example.
What is the difference between {a} and {b}?
Write a short poem about {animal}.
Write a haiku about {concept}.
Write a short story about a child who visits {city}.
Summarise the main ideas of {concept} in a few sentences.
What would happen if there were no {concept}?
Describe a typical day for someone living in {country}.
What language is spoken in {country}, and what is its currency?""".splitlines()


def readable(name: str) -> str:
    return name.replace("_", " ")


def fill(template: str, rng: random.Random) -> str:
    a, b = rng.choice(PAIRS)
    return template.format(  # drawn in this order, so a seed gives the same prompts
        country=readable(rng.choice(COUNTRIES)), city=rng.choice(CITIES), animal=rng.choice(ANIMALS),
        concept=readable(rng.choice(CONCEPTS)), category=readable(rng.choice(CATEGORIES)),
        task=readable(rng.choice(TASKS)), sentence=rng.choice(SENTENCES).capitalize(), style=rng.choice(STYLES),
        style2=rng.choice(["friendlier", "more formal", "more exciting", "shorter"]),
        code_task=readable(rng.choice(CODE_TASKS)), builtin=rng.choice(BUILTINS), a=a, b=b)


def instruction_prompts(num_prompts: int, seed: int, completion_fraction: float = 0.12) -> list[tuple[str, bool]]:
    """(prompt, use_chat) pairs: mostly chat instructions, some plain completions, all distinct."""
    rng = random.Random(seed)
    prompts: dict[str, bool] = {}  # text → use_chat, in the order drawn
    for _ in range(num_prompts * 50):
        if len(prompts) == num_prompts:
            break
        chat = rng.random() >= completion_fraction
        prompts.setdefault(fill(rng.choice(TEMPLATES if chat else COMPLETIONS), rng), chat)
    return list(prompts.items())

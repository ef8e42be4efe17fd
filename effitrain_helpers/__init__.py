"""effitrain_helpers: the machinery the lesson notebooks share.

Each module answers one question a lesson asks:

- ``settings``   which size (small or full) and which cache folder this run uses
- ``devices``    what hardware do I have? (lesson 1.1)
- ``models``     which model do I load, and from where? (lesson 1.1 onwards)
- ``corpus``     the workbook's own English text, used to train the offline tokenizer
- ``bench``      how fast is a matrix product here? (lesson 1.1)
- ``plots``      figures of the lessons (benchmark curves, the four steps of data parallelism)
- ``widgets``    interactive controls for demos
- ``exercises``  check / hint / solution for the "Let's practice" sections
- ``checks``     the exercises of each lesson
- ``cli``        the ``effitrain`` command line
- ``optimizer_memory``  how many bytes does this optimizer keep? (lessons 4.1-4.3)
- ``optimizer_compare`` which optimizer keeps the least, at what speed and loss? (lessons 4.1-4.3)
- ``lessons``    which lessons does the course have, and which are here? (the start page's map)
- ``editions``   the classroom's student and instructor notebooks, built from the solved ones
- ``kit``        where is the classroom's offline kit, and what is in it? (``effitrain prefetch``)

Importing this package is cheap: transformers, accelerate, datasets and bitsandbytes are only imported
inside the functions that need them.
"""

__version__ = "0.1.0"

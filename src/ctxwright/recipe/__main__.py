"""``python -m ctxwright.recipe [PATH]``: write the options table (default ``docs/options.md``)."""

import sys

from ctxwright.recipe.docs import write_options_table

if __name__ == "__main__":  # a module importer (a docs or layering check) must not write files
    print(write_options_table(*sys.argv[1:2]))

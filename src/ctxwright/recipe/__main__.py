"""``python -m ctxwright.recipe [PATH]``: write the options table (default ``docs/options.md``)."""

import sys

from ctxwright.recipe.docs import write_options_table

print(write_options_table(*sys.argv[1:2]))

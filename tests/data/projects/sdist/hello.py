import antlr4
import docopt

print("antlr4", antlr4.__name__, "docopt", docopt.__version__)

import antlr4
import docopt
import langdetect
import sqlitedict

print(antlr4.__name__, docopt.__version__, langdetect.__name__, sqlitedict.__version__)

"""The words core/normalize.py speaks for English written forms: pure data, no logic.

    MONTHS, MONTH_ABBR   month names, and their abbreviations ("Sep", "Sept.") -> the name
    SCALE                the scale after an amount: "$5k", "£2M", "3 bn" -> thousand ...
    CURRENCY             a symbol or code -> (one, many, one sub-unit, many sub-units)
    UNITS                a unit after a number -> (singular, plural)
    TITLES               abbreviations that always stand before a name or number
    ABBREVIATIONS        abbreviations whose dot may also end the sentence
    FRACTIONS            (numerator, denominator) -> the spoken fraction
"""

from __future__ import annotations

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
MONTH_ABBR = {m[:3]: m for m in MONTHS} | {"Sept": "September"}

SCALE = {"k": "thousand", "K": "thousand", "thousand": "thousand", "m": "million",
         "M": "million", "mn": "million", "million": "million", "b": "billion", "B": "billion",
         "bn": "billion", "billion": "billion", "t": "trillion", "T": "trillion",
         "trillion": "trillion"}
CURRENCY = {"$": ("dollar", "dollars", "cent", "cents"), "€": ("euro", "euros", "cent", "cents"),
            "£": ("pound", "pounds", "penny", "pence"), "¥": ("yen", "yen", "", ""),
            "₹": ("rupee", "rupees", "paisa", "paise"),
            "USD": ("dollar", "dollars", "cent", "cents"),
            "EUR": ("euro", "euros", "cent", "cents"),
            "GBP": ("pound", "pounds", "penny", "pence")}
UNITS = {
    "km": ("kilometer", "kilometers"), "m": ("meter", "meters"), "cm": ("centimeter", "centimeters"),
    "mm": ("millimeter", "millimeters"), "mi": ("mile", "miles"), "ft": ("foot", "feet"),
    "kg": ("kilogram", "kilograms"), "g": ("gram", "grams"), "mg": ("milligram", "milligrams"),
    "lb": ("pound", "pounds"), "lbs": ("pound", "pounds"), "oz": ("ounce", "ounces"),
    "L": ("liter", "liters"), "l": ("liter", "liters"), "ml": ("milliliter", "milliliters"),
    "mL": ("milliliter", "milliliters"), "km/h": ("kilometer per hour", "kilometers per hour"),
    "kph": ("kilometer per hour", "kilometers per hour"), "mph": ("mile per hour", "miles per hour"),
    "°C": ("degree Celsius", "degrees Celsius"), "°F": ("degree Fahrenheit", "degrees Fahrenheit"),
    "°": ("degree", "degrees"), "kB": ("kilobyte", "kilobytes"), "KB": ("kilobyte", "kilobytes"),
    "MB": ("megabyte", "megabytes"), "GB": ("gigabyte", "gigabytes"), "TB": ("terabyte", "terabytes"),
    "Hz": ("hertz", "hertz"), "kHz": ("kilohertz", "kilohertz"), "MHz": ("megahertz", "megahertz"),
    "GHz": ("gigahertz", "gigahertz"), "ms": ("millisecond", "milliseconds"),
    "kW": ("kilowatt", "kilowatts"), "kWh": ("kilowatt hour", "kilowatt hours"),
    "min": ("minute", "minutes"), "mins": ("minute", "minutes"), "hr": ("hour", "hours"),
    "hrs": ("hour", "hours"), "sec": ("second", "seconds"), "secs": ("second", "seconds"),
}

# Their dot is never a sentence end.
TITLES = {"Mr.": "Mister", "Mrs.": "Missus", "Ms.": "Miz", "Dr.": "Doctor", "Prof.": "Professor",
          "Mt.": "Mount", "Gen.": "General", "Capt.": "Captain", "Sgt.": "Sergeant"}
# Their dot is kept when the text ends there or a capital follows.
ABBREVIATIONS = {"Jr.": "Junior", "Sr.": "Senior", "vs.": "versus", "etc.": "et cetera",
                 "e.g.": "for example", "i.e.": "that is", "approx.": "approximately",
                 "Ave.": "Avenue", "Blvd.": "Boulevard", "Rd.": "Road", "Dept.": "Department",
                 "Inc.": "Incorporated", "Ltd.": "Limited", "Corp.": "Corporation",
                 "Co.": "Company", "Fig.": "Figure", "Vol.": "Volume"}

FRACTIONS = {(1, 2): "one half", (1, 3): "one third", (2, 3): "two thirds",
             (1, 4): "one quarter", (3, 4): "three quarters"}
